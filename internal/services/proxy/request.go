package proxy

// What the proxy screens of a request before anything judges it: that
// its path means the same to every server (screen), whether it asks to
// switch protocols (upgrade), and a body the client fails to send
// (clientBody). What is judged must be what the upstream serves, and
// nothing must pass the proxy unjudged.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"path"
	"strings"
	"unicode/utf8"
)

// canonical reports whether p — the request's path, decoded once — is a
// clean absolute path (a trailing slash kept) that every common server
// resolves as the proxy does, and the path the filters match: p without
// its trailing slash. raw is the path as the client sent it (its
// escaped form). Refused, because some server reads them otherwise:
//   - a . or .. segment, a repeated / (every server cleans them);
//   - a ; (Tomcat and Jetty drop a segment's ;parameters: /ok/..;/admin
//     is /admin to them);
//   - a % left after one decoding (a server that decodes twice reads
//     %252e%252e as ..);
//   - a \ (Windows servers read it as /), and a segment ending in a dot
//     or a space (Windows drops them: /admin. is /admin);
//   - an encoded / (%2F: one server splits there, another does not);
//   - a control character or bytes that are not UTF-8 (an overlong
//     encoding of / or . is one to a lax decoder).
func canonical(p, raw string) (string, bool) {
	if p == "" || strings.ContainsAny(p, `;%\`) || !utf8.ValidString(p) || strings.Contains(raw, "%2f") || strings.Contains(raw, "%2F") {
		return "", false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f {
			return "", false
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ") {
			return "", false // the . and .. segments too
		}
	}
	clean := path.Clean("/" + p)
	want := clean
	if strings.HasSuffix(p, "/") && clean != "/" {
		want += "/"
	}
	return clean, want == p
}

// upgrade is what a request asks of the proxy's protocol.
type upgrade int

const (
	noUpgrade        upgrade = iota // none (an h2c offer is taken out)
	websocketUpgrade                // Upgrade: websocket, for --allow-websocket
	refusedUpgrade                  // any other, or CONNECT: never forwarded
)

// screenUpgrade reads the request's Upgrade and Connection headers and
// takes out what the proxy never forwards: an h2c offer (with its
// HTTP2-Settings), which the client makes expecting that it may be
// declined, and HTTP2-Settings on any request. What is left is a
// WebSocket upgrade, or one the proxy refuses (another protocol,
// several, or CONNECT, the tunnel of HTTP/2's WebSockets).
func screenUpgrade(r *http.Request) upgrade {
	h := r.Header
	h.Del("Http2-Settings")
	if r.Method == http.MethodConnect {
		return refusedUpgrade
	}
	if len(h["Upgrade"]) == 0 {
		return noUpgrade
	}
	var offered []string
	for _, v := range h["Upgrade"] {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.EqualFold(p, "h2c") {
				offered = append(offered, p)
			}
		}
	}
	if len(offered) == 0 {
		// h2c alone: declined, as a server that does not speak it does.
		h.Del("Upgrade")
		dropConnectionTokens(h, "upgrade", "http2-settings")
		return noUpgrade
	}
	if len(offered) == 1 && strings.EqualFold(offered[0], "websocket") && hasToken(h["Connection"], "upgrade") {
		h["Upgrade"] = []string{"websocket"}
		return websocketUpgrade
	}
	return refusedUpgrade
}

// hasToken reports whether a comma-separated header names token (in
// any case).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), token) {
				return true
			}
		}
	}
	return false
}

// dropConnectionTokens removes the named tokens from the Connection
// header (and the header, when none is left).
func dropConnectionTokens(h http.Header, tokens ...string) {
	var kept []string
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			drop := tok == ""
			for _, t := range tokens {
				drop = drop || strings.EqualFold(tok, t)
			}
			if !drop {
				kept = append(kept, tok)
			}
		}
	}
	if len(kept) == 0 {
		h.Del("Connection")
		return
	}
	h["Connection"] = []string{strings.Join(kept, ", ")}
}

// headerName is the name a server that reads _ as - (CGI, WSGI, some
// nginx set-ups) takes a request header for: X_Remote_User is
// X-Remote-User to it.
func headerName(name string) string {
	return textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(name, "_", "-"))
}

// clientBody is a request's body as the proxy reads it for the
// upstream: it keeps the first error reading it, so that a body the
// client failed to send (a bad chunk size, a bare LF, the read timeout)
// is answered as the client's fault, not the upstream's.
type clientBody struct {
	io.ReadCloser
	err error
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}

type clientBodyKey struct{}

// withClientBody has r's body, if it has one, read through a clientBody
// that the request's context holds (ReverseProxy hands its error handler
// a request whose body it has wrapped).
func withClientBody(r *http.Request) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	b := &clientBody{ReadCloser: r.Body}
	r = r.WithContext(context.WithValue(r.Context(), clientBodyKey{}, b))
	r.Body = b
	return r
}

// bodyError is the error reading r's body from the client, if any.
func bodyError(r *http.Request) error {
	if b, ok := r.Context().Value(clientBodyKey{}).(*clientBody); ok {
		return b.err
	}
	return nil
}
