package credentials

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/callerauth/callerauth/token"
)

// ErrPlaintext is returned (wrapped) when a request would carry a bearer
// token over plaintext TCP.
var ErrPlaintext = errors.New("credentials: refusing to send a bearer token over plaintext http")

// Transport validates the configuration and returns an HTTP round tripper
// that carries it: TLS with the configured CA pool and server name, every
// connection dialled to the Unix socket when the address names one, and,
// when a token is configured, "Authorization: Bearer <token>" read from the
// token source on every request. An expired JWT fails the request before it
// is sent (the error wraps [*token.ExpiredError]); a request to an http://
// URL over TCP is refused with [ErrPlaintext] instead of sending the token.
func (c Config) Transport() (http.RoundTripper, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	if c.TLS {
		cfg, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		base.TLSClientConfig = cfg
	}
	unix := IsUnixAddress(c.Address)
	if unix {
		path := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(c.Address, "unix://"), "unix:"), "unix-abstract:")
		if strings.HasPrefix(c.Address, "unix-abstract:") {
			path = "@" + path
		}
		var d net.Dialer
		base.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}
		base.Proxy = nil
	}
	src := c.TokenSource()
	if src == nil {
		return traceTransport{base}, nil
	}
	return &bearerTransport{base: base, src: src, unix: unix}, nil
}

// BearerTransport wraps base so that every request carries src's token. It
// refuses plaintext http:// requests unless unixSocket says base dials a
// Unix socket.
func BearerTransport(base http.RoundTripper, src token.Source, unixSocket bool) http.RoundTripper {
	return &bearerTransport{base: base, src: src, unix: unixSocket}
}

type bearerTransport struct {
	base http.RoundTripper
	src  token.Source
	unix bool
}

func (t *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	fail := func(err error) (*http.Response, error) {
		// A RoundTripper must close the body, even on error.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	if req.URL.Scheme != "https" && !t.unix {
		return fail(fmt.Errorf("%w: %s://%s", ErrPlaintext, req.URL.Scheme, req.URL.Host))
	}
	tok, err := t.src.Token(req.Context())
	if err != nil {
		return fail(err)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	if traced(req.Context()) {
		traceContext.Inject(req.Context(), propagation.HeaderCarrier(r.Header))
	}
	return t.base.RoundTrip(r)
}
