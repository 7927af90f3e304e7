// Package serve is what every callerauth service shares to serve: the
// limits a client is held to, and (as the services move onto it) the
// listeners, TLS, metrics and shutdown. A service adds its own API and
// rules; it does not set these up itself.
package serve

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/framing"
)

// HTTPLimits bound what one client may hold of an HTTP server: how long it
// may take to send a request, how long the response may take, how long an
// idle keep-alive connection stays open, and how large the headers may be.
// Without them a client that trickles a body, or opens connections and
// leaves them idle, holds a goroutine and a socket for as long as it likes.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading the request line and headers.
	// Default 5 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included.
	// Default 15 s.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of the request headers to
	// the end of the response. Default 30 s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long. Default
	// 60 s.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers together; larger
	// requests are answered 431. Default 32 KiB (a bearer token is a few
	// KiB; the bearer package refuses one over 16 KiB).
	MaxHeaderBytes int
}

// defaultHTTPLimits are the defaults written on each field.
func defaultHTTPLimits() HTTPLimits {
	return HTTPLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 32 << 10}
}

// AddFlags registers the limits as flags, with l's current values as the
// defaults.
func (l *HTTPLimits) AddFlags(f *pflag.FlagSet) {
	f.DurationVar(&l.ReadHeaderTimeout, "http-read-header-timeout", l.ReadHeaderTimeout, "how long a client may take to send the request line and headers")
	f.DurationVar(&l.ReadTimeout, "http-read-timeout", l.ReadTimeout, "how long a client may take to send a whole request, body included")
	f.DurationVar(&l.WriteTimeout, "http-write-timeout", l.WriteTimeout, "how long a response may take, from the end of the request headers")
	f.DurationVar(&l.IdleTimeout, "http-idle-timeout", l.IdleTimeout, "how long an idle keep-alive connection stays open")
	f.IntVar(&l.MaxHeaderBytes, "http-max-header-bytes", l.MaxHeaderBytes, "largest request line and headers accepted (larger: 431)")
}

// Validate refuses a limit that is not one: zero or negative would mean
// "no limit" to net/http.
func (l HTTPLimits) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--http-read-header-timeout", l.ReadHeaderTimeout}, {"--http-read-timeout", l.ReadTimeout},
		{"--http-write-timeout", l.WriteTimeout}, {"--http-idle-timeout", l.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("serve: %s %s: want a positive duration (there is no \"unlimited\")", d.flag, d.v))
		}
	}
	if l.MaxHeaderBytes < 4<<10 {
		errs = append(errs, fmt.Errorf("serve: --http-max-header-bytes %d: want at least 4096", l.MaxHeaderBytes))
	}
	if l.ReadHeaderTimeout > l.ReadTimeout && l.ReadTimeout > 0 {
		errs = append(errs, errors.New("serve: --http-read-header-timeout is longer than --http-read-timeout, which covers the headers too"))
	}
	return errors.Join(errs...)
}

// Server returns an http.Server for h held to the limits. Serve it on
// [HTTPLimits.Listener]: a request whose HTTP/1.x framing the listener
// refuses is answered 400 before h sees it.
func (l HTTPLimits) Server(h http.Handler) *http.Server { return l.server(h, nil) }

// server is Server, counting each refusal of a request's framing in
// malformed (http_malformed_requests_total) when it is set.
func (l HTTPLimits) server(h http.Handler, malformed *prometheus.CounterVec) *http.Server {
	return &http.Server{Handler: refuseMalformed(h, malformed), ConnContext: framing.ConnContext, ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout,
		WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes}
}

// Listener returns lis, TLS terminated with cfg when it is not nil (the
// handshake bounded by the header timeout), with each HTTP/1.x
// connection's requests read through the framing check (package framing): a
// request with both Content-Length and Transfer-Encoding, a body on a
// method that has none, a malformed chunk or a trailer is refused at once
// and its connection closed, rather than read one way and held until the
// read timeout.
func (l HTTPLimits) Listener(lis net.Listener, cfg *tls.Config) net.Listener {
	maxHead := l.MaxHeaderBytes
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	return framing.Listener(lis, cfg, cmp.Or(l.ReadHeaderTimeout, 10*time.Second), maxHead+4096)
}

// refuseMalformed answers a request whose framing the connection's
// reader refused: 400 bad_request naming the problem, Connection: close,
// before anything else sees it.
func refuseMalformed(h http.Handler, malformed *prometheus.CounterVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := framing.Refused(r); ok {
			if malformed != nil {
				malformed.WithLabelValues(p.Key).Inc()
			}
			w.Header().Set("Connection", "close")
			guard.WriteHTTPError(w, guard.ReasonBadRequest, p.Text)
			return
		}
		h.ServeHTTP(w, r)
	})
}
