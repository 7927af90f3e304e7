package proxy_test

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/kit/servicetest"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

const audience = "upstream-svc"

type env struct {
	iss    *devissuer.Issuer
	roots  *x509.CertPool
	tokens map[string]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	pem, err := os.ReadFile(iss.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	e := &env{iss: iss, roots: roots, tokens: map[string]string{}}
	for name, req := range map[string]devissuer.TokenRequest{
		"client":         {Namespace: "demo", ServiceAccount: "client", Audiences: []string{audience}},
		"intruder":       {Namespace: "demo", ServiceAccount: "intruder", Audiences: []string{audience}},
		"other-audience": {Namespace: "demo", ServiceAccount: "client", Audiences: []string{"another-service"}},
	} {
		tok, err := iss.Mint(req)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[name] = tok.Token
	}
	return e
}

// options are the proxy's defaults in front of upstream, on a loopback
// port with a certificate from the dev issuer's CA, reviewing tokens
// through the dev issuer, letting demo:client through.
func (e *env) options(t *testing.T, upstream string) proxy.Options {
	t.Helper()
	addr, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := e.iss.IssueServingCert(t.TempDir(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o := proxy.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput = addr, "", io.Discard
	o.Serve.TLSCertFile, o.Serve.TLSKeyFile = cert, key
	o.Callers.Kubeconfig = e.iss.KubeconfigFile()
	o.Upstream, o.Callers.Audience, o.AllowServiceAccounts = upstream, audience, []string{"demo:client"}
	return o
}

// run starts the proxy until the test ends and returns it and its address.
func run(t *testing.T, o proxy.Options) (*proxy.Server, string) {
	t.Helper()
	return runTrusting(t, o, roots(t, o))
}

// runTrusting is run, the proxy's certificate checked against pool.
func runTrusting(t *testing.T, o proxy.Options, pool *x509.CertPool) (*proxy.Server, string) {
	t.Helper()
	s := servicetest.New(t, o, nil, proxy.New)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	trust := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	for i := 0; ; i++ {
		c, err := tls.Dial("tcp", o.Serve.Listen, trust)
		if err == nil {
			_ = c.Close()
			return s, o.Serve.Listen
		}
		if i == 300 {
			t.Fatalf("the proxy did not listen on %s: %v", o.Serve.Listen, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// roots trusts the proxy's serving certificate: the dev issuer's CA, the
// CA file beside the kubeconfig.
func roots(t *testing.T, o proxy.Options) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(cmp.Or(o.Callers.Kubeconfig, o.AuthorizationKubeconfig)), devissuer.FileCA))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

// seen is what the upstream received.
type seen struct {
	User, Authorization string
	Users               int
	Groups, Extra       []string
	Path                string
}

func echoUpstream(reached *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		s := seen{User: r.Header.Get("X-Remote-User"), Users: len(r.Header.Values("X-Remote-User")), Groups: r.Header.Values("X-Remote-Group"),
			Authorization: r.Header.Get("Authorization"), Path: r.URL.Path}
		for name := range r.Header {
			if strings.HasPrefix(name, "X-Remote-Extra-") {
				s.Extra = append(s.Extra, name)
			}
		}
		_ = json.NewEncoder(w).Encode(s)
	})
}

func (e *env) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.roots, MinVersion: tls.VersionTLS12}}}
}

func (e *env) get(t *testing.T, url, token string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTP(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	up := httptest.NewServer(echoUpstream(&reached))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.IgnorePaths = []string{"/healthz"}
	s, addr := run(t, o)
	base := "https://" + addr

	// Allowed: the identity the proxy verified, never the one the client
	// claims; no token upstream.
	code, body := e.get(t, base+"/hello", e.tokens["client"], "X-Remote-User", "system:masters", "X-Remote-Group", "system:masters", "X-Remote-Extra-Scopes", "all")
	var got seen
	if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("allowed caller: %d %s", code, body)
	}
	if got.User != "system:serviceaccount:demo:client" || got.Users != 1 || got.Authorization != "" || got.Path != "/hello" {
		t.Errorf("upstream saw %+v: want the verified user alone, no Authorization", got)
	}
	if !containsAll(got.Groups, "system:serviceaccounts", "system:serviceaccounts:demo", "system:authenticated") || containsAll(got.Groups, "system:masters") {
		t.Errorf("upstream saw groups %q: want the verified ones and not the client's", got.Groups)
	}
	for _, x := range got.Extra {
		if x == "X-Remote-Extra-Scopes" {
			t.Errorf("a client's X-Remote-Extra-Scopes reached the upstream")
		}
	}

	before := reached.Load()
	for _, c := range []struct {
		name, token string
		code        int
		reason      string
	}{
		{"a service account not allowed", e.tokens["intruder"], http.StatusForbidden, "caller_not_allowed"},
		{"a token for another service", e.tokens["other-audience"], http.StatusUnauthorized, "token_invalid"},
		{"no token", "", http.StatusUnauthorized, "token_missing"},
		{"not a token", "garbage", http.StatusUnauthorized, "token_invalid"},
	} {
		code, body := e.get(t, base+"/hello", c.token)
		var r struct{ Reason string }
		_ = json.Unmarshal([]byte(body), &r)
		if code != c.code || r.Reason != c.reason {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, body, c.code, c.reason)
		}
	}
	// A path not in canonical form is refused before anything: the path
	// filters and RBAC must judge the path the upstream serves.
	for _, p := range []string{"/healthz/../hello", "/healthz/./x", "//hello", "/a//b"} {
		code, body := e.get(t, base+p, e.tokens["client"])
		if code != http.StatusBadRequest || !strings.Contains(body, `"bad_request"`) {
			t.Errorf("%s: %d %s, want 400 bad_request", p, code, body)
		}
	}
	if n := reached.Load() - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}

	// An ignored path needs no token, and still gets no forged identity.
	code, body = e.get(t, base+"/healthz", "", "X-Remote-User", "system:masters")
	if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || got.User != "" {
		t.Errorf("ignored path: %d %s: want the upstream's answer with no X-Remote-User", code, body)
	}

	m, err := scrape.Values(s.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if m["proxy_bad_path_requests_total"] != 4 {
		t.Errorf("proxy_bad_path_requests_total %v, want 4", m["proxy_bad_path_requests_total"])
	}
	if m["proxy_auth_violations_total{caller_not_allowed}"] != 1 || m["proxy_ignored_path_requests_total"] != 1 {
		t.Errorf("metrics: violations %v, ignored %v", m["proxy_auth_violations_total{caller_not_allowed}"], m["proxy_ignored_path_requests_total"])
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

func TestAuditLetsARefusalThroughAndCountsIt(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	up := httptest.NewServer(echoUpstream(&reached))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.Callers.Mode = "audit"
	s, addr := run(t, o)
	code, body := e.get(t, "https://"+addr+"/hello", e.tokens["intruder"])
	if code != http.StatusOK || reached.Load() != 1 {
		t.Fatalf("audit: %d %s, upstream reached %d times: want the refusal let through", code, body, reached.Load())
	}
	m, err := scrape.Values(s.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if m["proxy_auth_violations_total{caller_not_allowed}"] != 1 {
		t.Errorf("audit: the refusal let through was not counted: %v", m["proxy_auth_violations_total{caller_not_allowed}"])
	}
}

func TestAllowPathsAndUnixUpstream(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	sock := filepath.Join(t.TempDir(), "up.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: echoUpstream(&reached), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = up.Serve(lis) }()
	t.Cleanup(func() { _ = up.Close() })
	o := e.options(t, "unix://"+sock)
	o.AllowPaths = []string{"/metrics"}
	_, addr := run(t, o)
	if code, body := e.get(t, "https://"+addr+"/metrics", e.tokens["client"]); code != http.StatusOK || !strings.Contains(body, "system:serviceaccount:demo:client") {
		t.Errorf("over a Unix socket: %d %s", code, body)
	}
	if code, _ := e.get(t, "https://"+addr+"/other", e.tokens["client"]); code != http.StatusNotFound {
		t.Errorf("a path outside --allow-paths: %d, want 404", code)
	}
	if code, _ := e.get(t, "https://"+addr+"/metrics/../other", e.tokens["client"]); code != http.StatusBadRequest {
		t.Errorf("a path that cleans to one outside --allow-paths: %d, want 400 (not in canonical form)", code)
	}
}

func TestUpstreamDown(t *testing.T) {
	e := newEnv(t)
	dead, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	s, addr := run(t, e.options(t, "http://"+dead))
	code, body := e.get(t, "https://"+addr+"/hello", e.tokens["client"])
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "upstream_unavailable") {
		t.Errorf("upstream down: %d %s", code, body)
	}
	m, _ := scrape.Values(s.Registry())
	if m["proxy_upstream_errors_total"] != 1 {
		t.Errorf("proxy_upstream_errors_total %v, want 1", m["proxy_upstream_errors_total"])
	}
}

// TestGRPC: a gRPC upstream behind the proxy — unary calls and a stream
// pass with their trailers, the identity arrives as metadata, a refusal
// is a gRPC status with the reason in its ErrorInfo.
func TestGRPC(t *testing.T) {
	e := newEnv(t)
	var user atomic.Value
	up := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		user.Store(strings.Join(md.Get("x-remote-user"), ","))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-upstream-trailer", "kept"))
		return h(ctx, req)
	}))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(up, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(lis) }()
	t.Cleanup(up.Stop)
	o := e.options(t, "http://"+lis.Addr().String())
	o.UpstreamHTTP2 = true
	_, addr := run(t, o)
	conn, ctx := e.dial(t, addr, "client")
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check through the proxy: %v %v", resp, err)
	}
	if u, _ := user.Load().(string); u != "system:serviceaccount:demo:client" {
		t.Errorf("the upstream saw x-remote-user %q", u)
	}
	// A stream: the first status, then a change, as they happen.
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch, first message: %v %v", m, err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch, the change streamed: %v %v", m, err)
	}
	// A status the upstream answers with passes in its trailers — also
	// when the upstream sends it trailers-only (one HEADERS frame ending
	// the stream, as grpc-go answers an error before any message): the
	// proxy may flush the response's headers before it has read the end
	// of the stream, so it must send the status as trailers. Many calls,
	// for the flush races the end of the stream.
	for i := range 200 {
		var trailer metadata.MD
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"}, grpc.Trailer(&trailer)); status.Code(err) != codes.NotFound {
			t.Fatalf("call %d: the upstream's NotFound through the proxy: %v", i, err)
		}
		if got := trailer.Get("x-upstream-trailer"); len(got) != 1 || got[0] != "kept" {
			t.Fatalf("call %d: the upstream's trailing metadata through the proxy: %v", i, trailer)
		}
	}

	intruder, _ := e.dial(t, addr, "intruder")
	_, err = healthpb.NewHealthClient(intruder).Check(ctx, &healthpb.HealthCheckRequest{})
	if code, why := refusal(err); code != codes.PermissionDenied || why != "caller_not_allowed" {
		t.Errorf("an intruder's call: %v, want PermissionDenied caller_not_allowed", err)
	}
}

func TestCompleteRefuses(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name string
		edit func(*proxy.Options)
		want string
	}{
		{"no upstream", func(o *proxy.Options) { o.Upstream = "" }, "--upstream is required"},
		{"an upstream of another scheme", func(o *proxy.Options) { o.Upstream = "ftp://x" }, "--upstream \"ftp://x\""},
		{"no audience", func(o *proxy.Options) { o.Callers.Audience = "" }, "--caller-audience is required"},
		{"nobody allowed", func(o *proxy.Options) { o.AllowServiceAccounts = nil }, "name the callers let through"},
		{"a service account without its namespace", func(o *proxy.Options) { o.AllowServiceAccounts = []string{"client"} }, "want namespace:name"},
		{"no TLS", func(o *proxy.Options) { o.Serve.TLSCertFile, o.Serve.TLSKeyFile = "", "" }, "--tls-cert-file and --tls-key-file are required"},
		{"both path lists", func(o *proxy.Options) { o.AllowPaths, o.IgnorePaths = []string{"/a"}, []string{"/b"} }, "give one"},
		{"a bad pattern", func(o *proxy.Options) { o.IgnorePaths = []string{"healthz"} }, "beginning with /"},
		{"a mode", func(o *proxy.Options) { o.Callers.Mode = "lenient" }, "--caller-auth-mode"},
		{"no review rate", func(o *proxy.Options) { o.Authorization, o.AuthorizationQPS = proxy.AuthorizationRBAC, 0 }, "--authorization-qps 0"},
		{"no review burst", func(o *proxy.Options) { o.Authorization, o.AuthorizationBurst = proxy.AuthorizationRBAC, 0 }, "--authorization-burst 0"},
		{"Authorization as the user header", func(o *proxy.Options) { o.UserHeader = "authorization" }, "--user-header"},
		{"a CA for a plain upstream", func(o *proxy.Options) { o.UpstreamCAFile = e.iss.CAFile() }, "--upstream-ca-file verifies an https:// upstream"},
		{"a client CA file of no certificate", func(o *proxy.Options) { o.ClientCAFile = o.Callers.Kubeconfig }, "--client-ca-file"},
		{"an authorization", func(o *proxy.Options) { o.Authorization = "abac" }, "--authorization \"abac\""},
		{"a config file without rbac", func(o *proxy.Options) { o.ConfigFile = "x.yaml" }, "belong to --authorization rbac"},
		{"rbac with a missing config file", func(o *proxy.Options) { o.Authorization, o.ConfigFile = "rbac", "/nonexistent.yaml" }, "--config-file"},
		{"rbac with no allow TTL", func(o *proxy.Options) { o.Authorization, o.AuthorizationAllowTTL = "rbac", 0 }, "--authorization-allow-ttl"},
		{"rbac with no cache", func(o *proxy.Options) { o.Authorization, o.AuthorizationCacheMaxEntries = "rbac", 0 }, "--authorization-cache-max-entries"},
		{"an assertion key without an audience", func(o *proxy.Options) { o.IdentityAssertionKeyFile = "k.pem" }, "give --identity-assertion-audience"},
		{"a long assertion", func(o *proxy.Options) { o.IdentityAssertionAudience, o.IdentityAssertionTTL = "up", time.Hour }, "--identity-assertion-ttl 1h0m0s"},
	} {
		o := e.options(t, "http://127.0.0.1:1")
		c.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if err := e.options(t, "http://127.0.0.1:1").Validate(); err != nil {
		t.Errorf("the test's own options: %v", err)
	}
	rbacAlone := e.options(t, "http://127.0.0.1:1")
	rbacAlone.Authorization, rbacAlone.AllowServiceAccounts = proxy.AuthorizationRBAC, nil
	if err := rbacAlone.Validate(); err != nil {
		t.Errorf("--authorization rbac with no --allow-*: %v", err)
	}
}

// TestGRPCUpstreamDown: a gRPC call the upstream cannot take is
// Unavailable with the reason in its ErrorInfo.
func TestGRPCUpstreamDown(t *testing.T) {
	e := newEnv(t)
	dead, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	o := e.options(t, "http://"+dead)
	o.UpstreamHTTP2 = true
	_, addr := run(t, o)
	conn, ctx := e.dial(t, addr, "client")
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if code, why := refusal(err); code != codes.Unavailable || why != "upstream_unavailable" {
		t.Errorf("upstream down, over gRPC: %v, want Unavailable upstream_unavailable", err)
	}
}

// dial is a gRPC client of the proxy sending the caller's token, and a
// context bounding the test's calls; both end with the test.
func (e *env) dial(t *testing.T, addr, caller string) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := loopback.DialTLS(addr, e.roots, e.tokens[caller])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return conn, ctx
}

// refusal is a gRPC error's code and the reason its ErrorInfo carries.
func refusal(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), i.GetReason()
		}
	}
	return st.Code(), ""
}

// TestClientCertificates: with --client-ca-file a caller without a token
// may present a client certificate; its common name is the user, its
// organizations the groups. A token, when sent, is what is judged.
func TestClientCertificates(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	up := httptest.NewServer(echoUpstream(&reached))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.ClientCAFile, o.AllowUsers = e.iss.CAFile(), []string{"alice"}
	s, addr := run(t, o)
	pair := func(user string, groups ...string) tls.Certificate {
		t.Helper()
		certFile, keyFile, err := e.iss.IssueClientCert(t.TempDir(), user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	servingCert, servingKey, err := e.iss.IssueServingCert(t.TempDir(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(servingCert, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	foreignPEM, foreignKey, err := other.IssueClient("alice")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.X509KeyPair(foreignPEM, foreignKey)
	if err != nil {
		t.Fatal(err)
	}
	get := func(cert *tls.Certificate, token string) (int, string, error) {
		cfg := &tls.Config{RootCAs: e.roots, MinVersion: tls.VersionTLS12}
		if cert != nil {
			// Sent whatever CAs the proxy names (a client would not send a
			// foreign one on its own).
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/hello", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	alice := pair("alice", "ops")
	code, body, err := get(&alice, "")
	var got seen
	if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("alice's certificate: %d %s %v", code, body, err)
	}
	if got.User != "alice" || !containsAll(got.Groups, "ops", "system:authenticated") {
		t.Errorf("upstream saw %+v: want alice in ops and system:authenticated", got)
	}
	bob := pair("bob")
	if code, body, err := get(&bob, ""); err != nil || code != http.StatusForbidden || !strings.Contains(body, "caller_not_allowed") {
		t.Errorf("bob's certificate: %d %s %v, want 403 caller_not_allowed", code, body, err)
	}
	// A token is judged when sent, a certificate beside it notwithstanding.
	if code, body, err := get(&alice, e.tokens["intruder"]); err != nil || code != http.StatusForbidden || !strings.Contains(body, "caller_not_allowed") {
		t.Errorf("alice's certificate with the intruder's token: %d %s %v, want the token judged", code, body, err)
	}
	if code, body, err := get(nil, ""); err != nil || code != http.StatusUnauthorized || !strings.Contains(body, "token_missing") {
		t.Errorf("neither: %d %s %v, want 401 token_missing", code, body, err)
	}
	for name, c := range map[string]tls.Certificate{"a certificate of another CA": foreign, "a serving certificate": serving} {
		if code, body, err := get(&c, ""); err == nil {
			t.Errorf("%s: %d %s, want the handshake refused", name, code, body)
		}
	}
	m, err := scrape.Values(s.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if m["proxy_client_certificate_callers_total"] != 2 {
		t.Errorf("proxy_client_certificate_callers_total %v, want 2 (alice, bob)", m["proxy_client_certificate_callers_total"])
	}
}

// TestIdentityAssertion: the upstream gets a JWT of the verified caller,
// for its audience, bound to the request's method and path, signed with
// a key the proxy publishes on its metrics listener; a client's forged
// one never reaches it.
func TestIdentityAssertion(t *testing.T) {
	e := newEnv(t)
	got := make(chan http.Header, 4)
	up := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	t.Cleanup(up.Close)
	keyFile := filepath.Join(t.TempDir(), "assertion.pem")
	if err := decision.GenerateKeyFile(keyFile); err != nil {
		t.Fatal(err)
	}
	metrics, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	o := e.options(t, up.URL)
	o.Serve.MetricsListen, o.IgnorePaths = metrics, []string{"/healthz"}
	o.IdentityAssertionAudience, o.IdentityAssertionKeyFile, o.IdentityAssertionTTL = "upstream.example", keyFile, time.Minute
	_, addr := run(t, o)

	code, _ := e.get(t, "https://"+addr+"/v1/things", e.tokens["client"], proxy.AssertionHeader, "forged")
	if code != http.StatusOK {
		t.Fatalf("allowed caller: %d", code)
	}
	h := <-got
	if vs := h.Values(proxy.AssertionHeader); len(vs) != 1 || vs[0] == "forged" {
		t.Fatalf("the upstream got %q: want the proxy's assertion alone", vs)
	}
	var keys jose.JSONWebKeySet
	resp, err := http.Get("http://" + metrics + proxy.PathJWKS)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&keys)
	resp.Body.Close()
	if err != nil || len(keys.Keys) != 1 || !keys.Keys[0].IsPublic() {
		t.Fatalf("JWKS: %+v %v: want the one public key", keys, err)
	}
	jws, err := jose.ParseSignedCompact(h.Get(proxy.AssertionHeader), []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	if typ := jws.Signatures[0].Protected.ExtraHeaders["typ"]; typ != proxy.AssertionProfile.Type || jws.Signatures[0].Protected.KeyID != keys.Keys[0].KeyID {
		t.Errorf("header: typ %v kid %q; want %q and the published kid %q", typ, jws.Signatures[0].Protected.KeyID, proxy.AssertionProfile.Type, keys.Keys[0].KeyID)
	}
	payload, err := jws.Verify(keys.Keys[0].Key)
	if err != nil {
		t.Fatalf("the assertion does not verify with the published key: %v", err)
	}
	var claims struct {
		Iss, Aud, Sub, Htm, Htu, Jti string
		Iat, Exp                     int64
		Groups                       []string
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if claims.Iss != proxy.AssertionIssuer || claims.Aud != "upstream.example" || claims.Sub != "system:serviceaccount:demo:client" ||
		claims.Htm != "GET" || claims.Htu != "/v1/things" || claims.Jti == "" || claims.Exp-claims.Iat != 60 ||
		!containsAll(claims.Groups, "system:serviceaccounts:demo") {
		t.Errorf("claims %s", payload)
	}
	// An ignored path: no caller, so no assertion, and the client's gone.
	if code, _ := e.get(t, "https://"+addr+"/healthz", "", proxy.AssertionHeader, "forged"); code != http.StatusOK {
		t.Fatalf("ignored path: %d", code)
	}
	if h := <-got; h.Get(proxy.AssertionHeader) != "" {
		t.Errorf("ignored path: the upstream got %q", h.Get(proxy.AssertionHeader))
	}
}

// TestHTTPStream: a response of unknown length passes as it is written —
// the caller reads the first part while the upstream still holds the
// second — for a chunked body and for server-sent events.
func TestHTTPStream(t *testing.T) {
	e := newEnv(t)
	for _, ct := range []string{"application/octet-stream", "text/event-stream"} {
		t.Run(ct, func(t *testing.T) {
			release := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", ct)
				_, _ = io.WriteString(w, "first\n")
				w.(http.Flusher).Flush()
				<-release // the second part waits for the caller to have the first
				_, _ = io.WriteString(w, "second\n")
			}))
			t.Cleanup(up.Close)
			defer close(release)
			_, addr := run(t, e.options(t, up.URL))
			req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/stream", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+e.tokens["client"])
			resp, err := e.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := bufio.NewReader(resp.Body)
			got := make(chan string, 1)
			go func() {
				line, err := first.ReadString('\n')
				got <- fmt.Sprintf("%q %v", line, err)
			}()
			select {
			case g := <-got:
				if g != `"first\n" <nil>` {
					t.Fatalf("the first part: %s", g)
				}
			case <-time.After(20 * time.Second):
				// Not a timing assertion: the upstream writes nothing more
				// until the caller has the first part, so a proxy that
				// holds it back never delivers it.
				t.Fatal("the first part never reached the caller while the upstream held the second: the proxy buffered the stream")
			}
		})
	}
}
