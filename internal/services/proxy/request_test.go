package proxy_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/kit/malformed"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

// anyUpgrade is an upstream that switches protocols on every request —
// the worst upstream behind a proxy: it answers 101 with the protocol
// the request named (websocket when it named none) and then echoes each
// line it reads, so that a tunnel the proxy let open is seen.
type anyUpgrade struct {
	addr string
	mu   sync.Mutex
	got  []*http.Request // the requests it read, tunnel lines as GETs too
}

func newAnyUpgrade(t *testing.T) *anyUpgrade {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	u := &anyUpgrade{addr: lis.Addr().String()}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *anyUpgrade) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		u.mu.Lock()
		u.got = append(u.got, req)
		u.mu.Unlock()
		proto := req.Header.Get("Upgrade")
		if proto == "" {
			proto = "websocket"
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+proto+"\r\n\r\n")
		// The tunnel: whatever comes, even a request, is read and echoed.
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "GET ") {
				u.mu.Lock()
				u.got = append(u.got, &http.Request{Method: "TUNNEL", RequestURI: strings.TrimSpace(line)})
				u.mu.Unlock()
			}
			_, _ = io.WriteString(c, "echo: "+line)
		}
	}
}

func (u *anyUpgrade) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.got...)
}

// rawAnswer is what the proxy answered a hand-written request.
type rawAnswer struct {
	StatusCode int
	Reason     string // a refusal's
	Close      bool
}

// raw sends one request, written by hand, to the proxy over HTTP/1.1 and
// returns the answer and the connection (for what follows a 101).
func raw(t *testing.T, e *env, addr, request string) (rawAnswer, *bufio.Reader, net.Conn) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: e.roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	a := rawAnswer{StatusCode: resp.StatusCode, Close: resp.Close}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		var r struct{ Reason string }
		_ = json.NewDecoder(resp.Body).Decode(&r)
		a.Reason = r.Reason
	}
	return a, br, c
}

// TestUpgrades: a request that asks to switch protocols is judged like
// any other, and no tunnel opens that the proxy did not judge — against
// an upstream that answers 101 to anything.
func TestUpgrades(t *testing.T) {
	e := newEnv(t)
	tok := "Authorization: Bearer " + e.tokens["client"] + "\r\n"
	ws := "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	h2c := "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
	forged := "X-Remote-User: admin\r\n"
	for _, allow := range []bool{false, true} {
		up := newAnyUpgrade(t)
		o := e.options(t, "http://"+up.addr)
		o.IgnorePaths, o.AllowWebSocket = []string{"/healthz"}, allow
		s, addr := run(t, o)
		cases := []struct {
			name, request string
			code          int
			reason        string
		}{
			{"an h2c offer on a judged path", "GET /hello HTTP/1.1\r\nHost: x\r\n" + tok + h2c + "\r\n", http.StatusServiceUnavailable, "upstream_unavailable"},
			{"an h2c offer on an ignored path", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + h2c + "\r\n", http.StatusServiceUnavailable, "upstream_unavailable"},
			{"a plain request on an ignored path", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusServiceUnavailable, "upstream_unavailable"},
			{"a WebSocket upgrade on an ignored path", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + ws + "\r\n", http.StatusBadRequest, "bad_request"},
			{"another protocol", "GET /hello HTTP/1.1\r\nHost: x\r\n" + tok + "Connection: Upgrade\r\nUpgrade: foo/1\r\n\r\n", http.StatusBadRequest, "bad_request"},
			{"WebSocket and another", "GET /hello HTTP/1.1\r\nHost: x\r\n" + tok + "Connection: Upgrade\r\nUpgrade: websocket, foo/1\r\n\r\n", http.StatusBadRequest, "bad_request"},
			{"CONNECT", "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n" + tok + "\r\n", http.StatusBadRequest, "bad_request"},
		}
		refused := len(cases) - 4 // all but the h2c offers, the plain request and CONNECT (its target is no path: a bad path)
		// Under --allow-websocket the handshake is judged as any request;
		// without it, refused before anything.
		judged := []struct {
			name, request string
			code          int
			reason        string
		}{
			{"a WebSocket upgrade without a token", "GET /hello HTTP/1.1\r\nHost: x\r\n" + ws + forged + "\r\n", http.StatusUnauthorized, "token_missing"},
			{"a WebSocket upgrade by a caller not allowed", "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.tokens["intruder"] + "\r\n" + ws + "\r\n", http.StatusForbidden, "caller_not_allowed"},
		}
		if !allow {
			judged = append(judged, judged[0])
			judged[2].name, judged[2].request = "a WebSocket upgrade without --allow-websocket", "GET /hello HTTP/1.1\r\nHost: x\r\n"+tok+ws+"\r\n"
			for i := range judged {
				judged[i].code, judged[i].reason = http.StatusBadRequest, "bad_request"
			}
			refused += len(judged)
		}
		cases = append(cases, judged...)
		for _, c := range cases {
			resp, br, conn := raw(t, e, addr, c.request)
			if got := resp.Reason; resp.StatusCode != c.code || got != c.reason {
				t.Errorf("allow-websocket %v, %s: %d %s, want %d %s", allow, c.name, resp.StatusCode, got, c.code, c.reason)
			}
			// Whatever the answer, nothing written after it reaches the
			// upstream outside a judged request.
			_, _ = io.WriteString(conn, "GET /admin HTTP/1.1\r\nHost: x\r\n"+forged+"\r\n")
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, _ = br.ReadString('\n')
		}
		for _, r := range up.requests() {
			if r.Method == "TUNNEL" || r.URL.Path == "/admin" {
				t.Errorf("allow-websocket %v: %s %s reached the upstream unjudged", allow, r.Method, r.RequestURI)
			}
			if r.Header.Get("Upgrade") != "" || r.Header.Get("Http2-Settings") != "" {
				t.Errorf("allow-websocket %v: the upstream got Upgrade %q, HTTP2-Settings %q", allow, r.Header.Get("Upgrade"), r.Header.Get("Http2-Settings"))
			}
		}
		m, err := scrape.Values(s.Registry())
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(refused); m["proxy_upgrade_requests_total{refused}"] != want {
			t.Errorf("allow-websocket %v: proxy_upgrade_requests_total{refused} %v, want %v", allow, m["proxy_upgrade_requests_total{refused}"], want)
		}
		if !allow {
			continue
		}
		// Allowed: the handshake judged, the verified caller's identity on
		// it, then the tunnel.
		resp, br, conn := raw(t, e, addr, "GET /chat?room=1 HTTP/1.1\r\nHost: x\r\n"+tok+ws+forged+"\r\n")
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("an allowed WebSocket upgrade: %d", resp.StatusCode)
		}
		_, _ = io.WriteString(conn, "hello\n")
		if line, err := br.ReadString('\n'); line != "echo: hello\n" {
			t.Errorf("through the tunnel: %q %v", line, err)
		}
		var hs *http.Request
		for _, r := range up.requests() {
			if r.URL != nil && r.URL.Path == "/chat" {
				hs = r
			}
		}
		if hs == nil || hs.Header.Values("X-Remote-User")[0] != "system:serviceaccount:demo:client" || len(hs.Header.Values("X-Remote-User")) != 1 || hs.Header.Get("Authorization") != "" {
			t.Errorf("the upstream's handshake: %+v: want the verified user alone and no token", hs)
		}
	}
}

// TestPathsEveryServerReadsAlike: a path that some common server
// resolves otherwise than the proxy is refused before anything judges
// it; a plain one passes.
func TestPathsEveryServerReadsAlike(t *testing.T) {
	e := newEnv(t)
	up := newAnyUpgrade(t) // answers 101: a path that got through would show as 503
	o := e.options(t, "http://"+up.addr)
	o.IgnorePaths = []string{"/ok", "/ok/*"}
	s, addr := run(t, o)
	refused := []string{
		"/ok/..;/admin", "/ok;jsessionid=1/../admin", "/ok;/admin", "/ok/%3B/admin", // Tomcat, Jetty
		"/ok/%252e%252e/admin", "/%252e%252e/admin", "/ok/%25", // decoded twice
		`/ok\..\admin`, "/ok/%5c..%5cadmin", "/ok/..%5cadmin", // Windows separators
		"/ok/admin.", "/ok/admin%20", "/ok/..", "/ok/.", "/ok/./x", "/ok//x", "//ok", // cleaned or trimmed
		"/ok%2fadmin", "/ok%2Fx", // an encoded /
		"/ok/%00", "/ok/%0d%0a", "/ok/%c0%af", "/ok/%e0%80%ae%e0%80%ae/admin", "/ok/%ff", // controls, not UTF-8
	}
	for _, p := range refused {
		resp, _, _ := raw(t, e, addr, "GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if got := resp.Reason; resp.StatusCode != http.StatusBadRequest || got != "bad_request" {
			t.Errorf("%s: %d %s, want 400 bad_request", p, resp.StatusCode, got)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("%d refused paths reached the upstream", n)
	}
	for _, p := range []string{"/ok", "/ok/admin", "/ok/a-b_c~d.json", "/ok/caf%C3%A9", "/ok/v1.2/x"} {
		resp, _, _ := raw(t, e, addr, "GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode == http.StatusBadRequest {
			t.Errorf("%s: 400, want it passed on", p)
		}
	}
	m, err := scrape.Values(s.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if m["proxy_bad_path_requests_total"] != float64(len(refused)) {
		t.Errorf("proxy_bad_path_requests_total %v, want %d", m["proxy_bad_path_requests_total"], len(refused))
	}
}

// TestIdentityHeadersInUnderscoreForm: a client's identity headers are
// removed in every form a server may read as them.
func TestIdentityHeadersInUnderscoreForm(t *testing.T) {
	e := newEnv(t)
	got := make(chan http.Header, 2)
	up := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.IgnorePaths = []string{"/healthz"}
	_, addr := run(t, o)
	forged := "X_Remote_User: admin\r\nx_remote_group: system:masters\r\nX_REMOTE_EXTRA_scopes: all\r\nX-Remote_Extra-Tenant: b\r\nX_Callerauth_Identity: forged\r\nX_Callerauth_Audit_Refusal: none\r\n"
	for _, req := range []string{
		"GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.tokens["client"] + "\r\n" + forged + "\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\n" + forged + "\r\n",
	} {
		resp, _, _ := raw(t, e, addr, req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d for %q", resp.StatusCode, req)
		}
		for name, vs := range <-got {
			n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
			if strings.HasPrefix(n, "x-remote-") || strings.HasPrefix(n, "x-callerauth-") {
				if n != "x-remote-user" && n != "x-remote-group" || strings.Contains(name, "_") || strings.Join(vs, ",") == "admin" {
					t.Errorf("the upstream got %s: %q", name, vs)
				}
			}
		}
	}
}

// TestMalformedBody: a body the client fails to send is the client's
// fault — 400 bad_request — never an upstream error, on an ignored path
// too.
func TestMalformedBody(t *testing.T) {
	e := newEnv(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		_, _ = io.WriteString(w, "read it all")
	}))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.IgnorePaths = []string{"/healthz"}
	s, addr := run(t, o)
	chunked := "Transfer-Encoding: chunked\r\n\r\n"
	tok := "Authorization: Bearer " + e.tokens["client"] + "\r\n"
	bodies := []struct{ name, body string }{
		{"a bad chunk size", "zz\r\nhello\r\n0\r\n\r\n"},
		{"a bare LF", "5\nhello\n0\n\n"},
		{"a chunk longer than it says", "2\r\nhello\r\n0\r\n\r\n"},
	}
	for _, path := range []string{"/hello", "/healthz"} {
		for _, b := range bodies {
			resp, _, _ := raw(t, e, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\n"+tok+chunked+b.body)
			if got := resp.Reason; resp.StatusCode != http.StatusBadRequest || got != "bad_request" {
				t.Errorf("%s, %s: %d %s, want 400 bad_request", path, b.name, resp.StatusCode, got)
			}
		}
	}
	resp, _, _ := raw(t, e, addr, "POST /hello HTTP/1.1\r\nHost: x\r\n"+tok+chunked+"5\r\nhello\r\n0\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a well-formed chunked body: %d", resp.StatusCode)
	}
	m, err := scrape.Values(s.Registry())
	if err != nil {
		t.Fatal(err)
	}
	// Each is the client's: a body error the proxy met reading it, or a
	// chunk the framing check refused before the proxy read (when it came
	// with the head).
	framing := m["http_malformed_requests_total{chunk_invalid,proxy}"]
	if m["proxy_upstream_errors_total"] != 0 || m["proxy_client_body_errors_total"]+framing != float64(2*len(bodies)) {
		t.Errorf("proxy_upstream_errors_total %v, proxy_client_body_errors_total %v + http_malformed_requests_total %v: want 0 and %d", m["proxy_upstream_errors_total"], m["proxy_client_body_errors_total"], framing, 2*len(bodies))
	}
}

// TestAuditMarksWhatItLetThrough: under audit, a request the proxy
// would have refused reaches the upstream marked with the reason — in a
// header and in the identity assertion — and a client's mark is removed.
func TestAuditMarksWhatItLetThrough(t *testing.T) {
	e := newEnv(t)
	got := make(chan http.Header, 4)
	up := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.Callers.Mode, o.IdentityAssertionAudience, o.IdentityAssertionTTL = "audit", "upstream.example", time.Minute
	_, addr := run(t, o)
	for _, c := range []struct {
		name, token, mark string
	}{
		{"allowed", e.tokens["client"], ""},
		{"not allowed", e.tokens["intruder"], "caller_not_allowed"},
		{"no token", "", "token_missing"},
	} {
		if code, body := e.get(t, "https://"+addr+"/v1/things?page=2", c.token, proxy.AuditRefusalHeader, "forged"); code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		h := <-got
		if vs := h.Values(proxy.AuditRefusalHeader); len(vs) > 1 || h.Get(proxy.AuditRefusalHeader) != c.mark {
			t.Errorf("%s: the upstream got %s %q, want %q", c.name, proxy.AuditRefusalHeader, vs, c.mark)
		}
		a := h.Get(proxy.AssertionHeader)
		if c.token == "" {
			if a != "" {
				t.Errorf("%s: an assertion with no caller", c.name)
			}
			continue
		}
		jws, err := jose.ParseSignedCompact(a, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var claims struct {
			Htu          string `json:"htu"`
			AuditRefusal string `json:"audit_refusal"`
		}
		_ = json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &claims)
		if claims.AuditRefusal != c.mark || claims.Htu != "/v1/things?page=2" {
			t.Errorf("%s: the assertion's audit_refusal %q, htu %q; want %q and the path with its query", c.name, claims.AuditRefusal, claims.Htu, c.mark)
		}
	}
}

// TestAudienceOnEveryBackend: --caller-audience holds on each backend —
// under an AuthenticationConfiguration that lists another service's
// audience too, a token minted for that service is refused; a file that
// lists only others stops the proxy at start-up, naming both.
func TestAudienceOnEveryBackend(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	e := &env{iss: iss, roots: x509.NewCertPool(), tokens: map[string]string{}}
	pem, err := os.ReadFile(iss.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	e.roots.AppendCertsFromPEM(pem)
	for name, aud := range map[string]string{"client": audience, "other-audience": "another-service"} {
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "demo", ServiceAccount: "client", Audiences: []string{aud}})
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[name] = tok.Token
	}
	file := func(auds ...string) string {
		doc, _, err := authconfig.Convert(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: auds}}})
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "authn.yaml")
		if err := os.WriteFile(f, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	for _, backend := range []string{callers.BackendTokenReview, callers.BackendOIDC} {
		o := e.options(t, up.URL)
		if backend == callers.BackendOIDC {
			o.Callers.Backend, o.Callers.Kubeconfig, o.Callers.AuthenticationConfig = callers.BackendOIDC, "", file(audience, "another-service")
		}
		_, addr := runTrusting(t, o, e.roots)
		if code, body := e.get(t, "https://"+addr+"/x", e.tokens["client"]); code != http.StatusOK {
			t.Errorf("%s: a token for %s: %d %s", backend, audience, code, body)
		}
		if code, body := e.get(t, "https://"+addr+"/x", e.tokens["other-audience"]); code != http.StatusUnauthorized || !strings.Contains(body, "token_invalid") {
			t.Errorf("%s: a token for another service: %d %s, want 401 token_invalid", backend, code, body)
		}
	}
	o := e.options(t, up.URL)
	o.Callers.Backend, o.Callers.Kubeconfig, o.Callers.AuthenticationConfig = callers.BackendOIDC, "", file("another-service")
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.New(c); err == nil || !strings.Contains(err.Error(), `"`+audience+`"`) || !strings.Contains(err.Error(), "another-service") {
		t.Errorf("a file that lists only another service's audience: %v; want a start-up refusal naming both", err)
	}
}

// TestMalformedFramingIsRefusedAtOnce: the proxy answers every malformed
// HTTP/1.x framing (internal/kit/malformed) at once and closes its
// connection, for a caller it lets through (the body is read and would
// be forwarded) and for one without a token, on a path it proxies and on
// an ignored one — none reaches the upstream — and a well-framed
// pipelined pair is answered whole. A trailer (an Authorization after the
// body, say) never reaches the upstream.
func TestMalformedFramingIsRefusedAtOnce(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		if len(r.Trailer) > 0 {
			t.Errorf("a trailer reached the upstream: %v", r.Trailer)
		}
		reached.Add(1)
		_, _ = io.WriteString(w, "read it all")
	}))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.IgnorePaths = []string{"/healthz"}
	o.Serve.HTTP = serve.HTTPLimits{ReadHeaderTimeout: 5 * time.Minute, ReadTimeout: 5 * time.Minute, WriteTimeout: 5 * time.Minute, IdleTimeout: 5 * time.Minute, MaxHeaderBytes: 32 << 10}
	_, addr := run(t, o)
	dial := malformed.TLSDialer(addr, &tls.Config{RootCAs: e.roots, MinVersion: tls.VersionTLS12})
	tok := "Bearer " + e.tokens["client"]
	t.Run("a caller it lets through", func(t *testing.T) { malformed.Check(t, dial, addr, "/hello", tok, "{}") })
	t.Run("no token", func(t *testing.T) { malformed.Check(t, dial, addr, "/hello", "", "") })
	t.Run("an ignored path", func(t *testing.T) { malformed.Check(t, dial, addr, "/healthz", "", "{}") })
	if n := reached.Load(); n != 4 {
		t.Errorf("%d requests reached the upstream; want the 4 pipelined ones", n)
	}
}
