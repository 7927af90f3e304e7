package guard_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
)

// TestEarlyRefusalOfATricklingBody: a request refused from its header
// while its body is still arriving is answered at once and its connection
// closed — not held until the server's read timeout, which here is ten
// minutes: a server that waited for the body would fail the test's
// deadline (a bound on a hang, not a timing claim).
func TestEarlyRefusalOfATricklingBody(t *testing.T) {
	callers := map[string]*authn.Caller{"ok": {Username: "u"}}
	g, _ := newGuard(t, guard.Config{Authenticator: fakeAuth(callers), Rule: binding.SystemBinding(map[string]string{"sys": "u"})})
	h := g.Middleware(func(r *http.Request) (binding.Request, error) {
		return binding.Request{System: r.Header.Get("X-System")}, nil
	}, guard.RequireIdentity())(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadTimeout: 10 * time.Minute, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, c := range []struct{ name, header, want string }{
		{"no token (401)", "", "token_missing"},
		{"a caller the rule refuses (403)", "Authorization: Bearer ok\r\nX-System: other\r\n", "principal_cannot_represent_system"},
	} {
		for _, framing := range []string{"Content-Length: 100000\r\n", "Transfer-Encoding: chunked\r\n"} {
			conn, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(time.Minute))
			_, _ = io.WriteString(conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\n"+c.header+framing+"\r\n")
			if strings.HasPrefix(framing, "Transfer") {
				_, _ = io.WriteString(conn, "10\r\n0123456789abcdef\r\n")
			} else {
				_, _ = io.WriteString(conn, "0123456789abcdef")
			}
			// The rest of the body never comes.
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s, %s: %v (the answer waited for the body)", c.name, framing, err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if !strings.Contains(string(body), c.want) || !resp.Close {
				t.Errorf("%s, %s: %d %s, Connection: close %v; want %s and the connection closed", c.name, framing, resp.StatusCode, body, resp.Close, c.want)
			}
			if n, err := br.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("%s, %s: after the answer, read %d, %v; want the connection's end", c.name, framing, n, err)
			}
			_ = conn.Close()
		}
	}
}
