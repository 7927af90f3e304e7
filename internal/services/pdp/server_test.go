package pdp_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/servicetest"
	"github.com/callerauth/callerauth/internal/kit/tokenvolume"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

const example = "../../../examples/secrets-engine"

type env struct {
	iss    *devissuer.Issuer
	srv    *pdp.Server
	url    string
	client *http.Client
	keys   jose.JSONWebKeySet
	// stopLog stops the decision log (withLog) and waits for it.
	stopLog func()
}

func start(t *testing.T, mode string, edit func(*pdp.Options)) *env {
	t.Helper()
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	key := filepath.Join(t.TempDir(), "signing.pem")
	if err := decision.GenerateKeyFile(key); err != nil {
		t.Fatal(err)
	}
	o := options(example, mode, key)
	o.CallerBindings = []string{"secrets-engine=system:serviceaccount:secrets-engine:secrets-engine"}
	o.Callers.Kubeconfig = iss.KubeconfigFile()
	if edit != nil {
		edit(&o)
	}
	s := newServer(t, o, nil)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &env{iss: iss, srv: s, url: hs.URL, client: hs.Client(), keys: s.Signer().JWKS()}
}

// options are the pdp's defaults on a loopback port over plain HTTP,
// serving the package in dir, signing with key, logging nothing.
func options(dir, mode, key string) pdp.Options {
	o := pdp.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput, o.InsecureHTTP = "127.0.0.1:0", "", io.Discard, true
	o.PolicyDir, o.Registry, o.SigningKeyFile = filepath.Join(dir, "policy"), filepath.Join(dir, "registry.json"), key
	o.Callers.Mode = mode
	return o
}

// newServer completes o and builds the pdp, verifying callers with auth
// (behind the stack's cache) instead of o's backend when auth is set.
func newServer(t testing.TB, o pdp.Options, auth authn.Authenticator) *pdp.Server {
	t.Helper()
	return servicetest.New(t, o, func(c *pdp.Config) {
		if auth != nil {
			c.Callers = callers.Custom(auth, "TokenReview")
		}
	}, pdp.New)
}

// token mints a token for a service account in the secrets-engine namespace.
func (e *env) token(t *testing.T, sa, aud string, issuedAt time.Time) string {
	t.Helper()
	tok, err := e.iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: sa, Audiences: []string{aud}, Lifetime: 10 * time.Minute, IssuedAt: issuedAt})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

func readExample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(example, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *env) post(t *testing.T, token string, body []byte, contentType string, path ...string) (int, []byte) {
	t.Helper()
	p := "/v1/check"
	if len(path) > 0 {
		p = path[0]
	}
	req, _ := http.NewRequest(http.MethodPost, e.url+p, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestPositiveAndN1N4 runs the specification's positive test and its four
// negatives in enforce and in warn.
func TestPositiveAndN1N4(t *testing.T) {
	allow := readExample(t, "check_request_allow_rotate.json")
	for _, mode := range []string{"enforce", "warn"} {
		t.Run(mode, func(t *testing.T) {
			e := start(t, mode, nil)
			good := e.token(t, "secrets-engine", "flex-auth", time.Time{})
			rows := []struct {
				name, token string
				enforce     int
				reason      string
			}{
				{"positive", good, 200, ""},
				{"N1 no Authorization header", "", 401, "token_missing"},
				{"N2 a token for secrets-engine:default", e.token(t, "default", "flex-auth", time.Time{}), 403, "principal_cannot_represent_system"},
				{"N3 a token minted without --audience=flex-auth", e.token(t, "secrets-engine", "https://kubernetes.default.svc", time.Time{}), 401, "token_invalid"},
				{"N4 a token past exp", e.token(t, "secrets-engine", "flex-auth", time.Now().Add(-20*time.Minute)), 401, "token_invalid"},
			}
			for _, r := range rows {
				before := e.counters(t)
				code, body := e.post(t, r.token, allow, "application/json")
				after := e.counters(t)
				reached := after["pdp_checks_total"] - before["pdp_checks_total"]
				viol := after["pdp_auth_violations_total{"+r.reason+"}"] - before["pdp_auth_violations_total{"+r.reason+"}"]
				if (reached == 1) != (r.enforce == 200 || mode == "warn") {
					t.Errorf("%s: reached policy %v times", r.name, reached)
				}
				if r.reason != "" && viol != 1 {
					t.Errorf("%s: pdp_auth_violations_total{%s} moved by %v under %s", r.name, r.reason, viol, mode)
				}
				want := r.enforce
				if mode == "warn" {
					want = 200
				}
				if code != want {
					t.Errorf("%s: status %d (%s); want %d", r.name, code, body, want)
					continue
				}
				if code != 200 {
					var eb map[string]string
					_ = json.Unmarshal(body, &eb)
					if eb["reason"] != r.reason || eb["error"] != sentenceOf(t, r.reason) {
						t.Errorf("%s: body %s; want reason %q and its sentence", r.name, body, r.reason)
					}
					if r.enforce == 403 && eb["error"] != "principal cannot represent system" {
						t.Errorf("%s: N2 says %q; the seed's words are %q", r.name, eb["error"], "principal cannot represent system")
					}
					continue
				}
				rec, err := decision.Verify(body, decision.VerifyOptions{Profile: pdp.RecordProfile, Keys: e.keys, Request: allow})
				if err != nil {
					t.Errorf("%s: the record does not verify: %v", r.name, err)
					continue
				}
				if rec.Effect != "allow" || rec.Reason != "catalog_lane_policy_matched" || rec.PolicyVersion != "v2" || rec.Provenance.Mode != mode {
					t.Errorf("%s: record %+v", r.name, rec)
				}
				if r.reason == "" {
					c := rec.Caller
					if !c.Authenticated || c.Principal != "system:serviceaccount:secrets-engine:secrets-engine" || c.AuthenticatedBy != "TokenReview" ||
						len(c.Audiences) != 1 || c.Audiences[0] != "flex-auth" || c.TokenExpiresAt == nil || c.CredentialID == "" {
						t.Errorf("%s: caller %+v", r.name, c)
					}
				} else if rec.Caller.Authenticated || rec.Caller.Reason != r.reason {
					t.Errorf("%s: under warn the record says %+v; want authenticated false, reason %s", r.name, rec.Caller, r.reason)
				}
			}
		})
	}
}

// counters sums pdp_checks_total and reads the violations by reason and mode.
func (e *env) counters(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "pdp_checks_total":
			for _, m := range mf.GetMetric() {
				out["pdp_checks_total"] += m.GetCounter().GetValue()
			}
		case "pdp_auth_violations_total":
			for _, m := range mf.GetMetric() {
				out["pdp_auth_violations_total{"+m.GetLabel()[0].GetValue()+"}"] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func TestBadRequestsNameTheField(t *testing.T) {
	e := start(t, "enforce", nil)
	good := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	allow := string(readExample(t, "check_request_allow_rotate.json"))
	tests := []struct {
		name, body, contentType, field string
	}{
		{"not JSON content", allow, "text/plain", "Content-Type"},
		{"unknown field", strings.Replace(allow, `"purpose"`, `"colour": "red", "purpose"`, 1), "application/json", "colour"},
		{"missing field", strings.Replace(allow, `"lane": "catalog",`, ``, 1), "application/json", "lane"},
		{"wrong type", strings.Replace(allow, `["password"]`, `"password"`, 1), "application/json", "fields"},
		{"empty subject", strings.Replace(allow, `"svc-rotator"`, `""`, 1), "application/json", "subject"},
		{"oversize", `{"system":"` + strings.Repeat("x", pdp.MaxBody) + `"}`, "application/json", "body"},
		{"not an object", `[1]`, "application/json", "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := e.post(t, good, []byte(tt.body), tt.contentType)
			var eb map[string]string
			_ = json.Unmarshal(body, &eb)
			if code != 400 || eb["field"] != tt.field {
				t.Fatalf("status %d body %s; want 400 naming %q", code, body, tt.field)
			}
		})
	}
	code, body := e.post(t, good, readExample(t, "check_request_deny_private_key.json"), "application/json; charset=utf-8")
	rec, err := decision.Verify(body, decision.VerifyOptions{Profile: pdp.RecordProfile, Keys: e.keys})
	if code != 200 || err != nil || rec.Effect != "deny" || rec.Reason != "private_key_fields_forbidden" {
		t.Fatalf("the denied example: %d %v %+v", code, err, rec)
	}
}

func TestJWKSEndpointAndForgedAllow(t *testing.T) {
	e := start(t, "enforce", nil)
	resp, err := e.client.Get(e.url + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	_ = json.NewDecoder(resp.Body).Decode(&set)
	resp.Body.Close()
	if len(set.Keys) != 1 || set.Keys[0].KeyID != e.srv.Signer().KeyID() || !strings.Contains(resp.Header.Get("Cache-Control"), "max-age") {
		t.Fatalf("JWKS %+v, Cache-Control %q", set, resp.Header.Get("Cache-Control"))
	}
	// A responder that knows the package id and version, but not the key.
	forger, _ := decision.NewSigner(pdp.RecordProfile, mustKey(t))
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(body, &req)
		rec := &decision.Record{DecisionID: "forged", Effect: "allow", Reason: "catalog_lane_policy_matched", PolicyVersion: "v2",
			Provenance: decision.Provenance{Evaluator: "cedar-go v1.9.1", Mode: "enforce", PolicyPackageID: "secrets-engine", DecidedAt: time.Now().UTC()},
			Caller:     decision.Caller{Authenticated: true, Principal: "system:serviceaccount:secrets-engine:secrets-engine"}}
		_ = rec.Bind(req)
		signed, _ := forger.Sign(rec)
		if r.URL.Query().Get("unsigned") != "" {
			signed.RecordJWS = ""
		}
		_ = json.NewEncoder(w).Encode(signed)
	}))
	defer fake.Close()
	var req map[string]any
	_ = json.Unmarshal(readExample(t, "check_request_allow_rotate.json"), &req)
	for _, url := range []string{fake.URL + "/v1/check", fake.URL + "/v1/check?unsigned=1"} {
		c := &decision.Client{Profile: pdp.RecordProfile, URL: url, Keys: set}
		rec, err := c.Check(context.Background(), req)
		if decision.Allowed(rec, err) || err == nil {
			t.Fatalf("a forged allow from %s was believed: %+v", url, rec)
		}
	}
	// The real PDP, through the same client, is believed.
	tok := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	c := &decision.Client{Profile: pdp.RecordProfile, URL: e.url + "/v1/check", Keys: set, HTTP: &http.Client{Transport: bearerTransport{tok}}}
	if rec, err := c.Check(context.Background(), req); !decision.Allowed(rec, err) {
		t.Fatalf("the real PDP's allow was refused: %v", err)
	}
}

type bearerTransport struct{ tok string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

func TestReloadKeepsThePreviousVersionOnFailure(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"manifest.json", "schema.cedarschema", "catalog.cedar"} {
		b, _ := os.ReadFile(filepath.Join(example, "policy", f))
		_ = os.WriteFile(filepath.Join(dir, f), b, 0o600)
	}
	e := start(t, "enforce", func(o *pdp.Options) { o.PolicyDir = dir })
	_ = os.WriteFile(filepath.Join(dir, "broken.cedar"), []byte(`permit (principal == Robot::"r", action, resource);`), 0o600)
	if err := e.srv.Reload(); err == nil || !strings.Contains(err.Error(), "broken.cedar") {
		t.Fatalf("Reload = %v; want the broken file named", err)
	}
	tok := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	code, body := e.post(t, tok, readExample(t, "check_request_allow_rotate.json"), "application/json")
	if code != 200 || !strings.Contains(string(body), "catalog_lane_policy_matched") {
		t.Fatalf("after a failed reload: %d %s", code, body)
	}
	_ = os.Remove(filepath.Join(dir, "broken.cedar"))
	_ = os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"package_id":"secrets-engine","policy_version":"v3"}`), 0o600)
	if err := e.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	_, body = e.post(t, tok, readExample(t, "check_request_allow_rotate.json"), "application/json")
	if !strings.Contains(string(body), `"policy_version":"v3"`) {
		t.Fatalf("reload did not take: %s", body)
	}
}

func TestOptionsRefusals(t *testing.T) {
	base := func() pdp.Options {
		o := options("d", "enforce", "k")
		o.CallerBindings = []string{"s=p"}
		return o
	}
	tests := []struct {
		name string
		edit func(*pdp.Options)
		want string
	}{
		{"plain HTTP off loopback", func(o *pdp.Options) { o.Serve.Listen = "0.0.0.0:8080" }, "--insecure-http serves plain HTTP only on a loopback"},
		{"no TLS files", func(o *pdp.Options) { o.InsecureHTTP = false }, "--tls-cert-file and --tls-key-file are required"},
		{"off without the flag", func(o *pdp.Options) { o.Callers.Mode = "off" }, "--insecure-caller-auth-off"},
		{"unknown mode", func(o *pdp.Options) { o.Callers.Mode = "lenient" }, `--caller-auth-mode "lenient"`},
		{"binding without =", func(o *pdp.Options) { o.CallerBindings = []string{"secrets-engine"} }, `--caller-binding "secrets-engine"`},
		{"no binding", func(o *pdp.Options) { o.CallerBindings = nil }, "at least one --caller-binding"},
		{"no signing key", func(o *pdp.Options) { o.SigningKeyFile = "" }, "--signing-key-file is required"},
		{"a malformed service-account principal", func(o *pdp.Options) {
			o.CallerBindings = []string{"secrets-engine=system:serviceaccount:secrets-engine"}
		}, `principal "system:serviceaccount:secrets-engine": want system:serviceaccount:<namespace>:<name>`},
		{"a service-account principal in uppercase", func(o *pdp.Options) {
			o.CallerBindings = []string{"s=system:serviceaccount:Secrets:engine"}
		}, "uppercase"},
		{"no read timeout", func(o *pdp.Options) { o.Serve.HTTP.ReadTimeout = 0 }, "--http-read-timeout 0s: want a positive duration"},
		{"tiny header limit", func(o *pdp.Options) { o.Serve.HTTP.MaxHeaderBytes = 100 }, "--http-max-header-bytes 100"},
		{"TLS files with --insecure-http", func(o *pdp.Options) { o.Serve.TLSCertFile, o.Serve.TLSKeyFile = "c", "k" }, "contradict each other"},
		{"a bad log level", func(o *pdp.Options) { o.Serve.LogLevel = "loud" }, `--log-level "loud"`},
		{"oidc without issuers", func(o *pdp.Options) { o.Callers.Backend = "oidc" }, "--caller-backend oidc needs --caller-authentication-config"},
		{"an unknown backend", func(o *pdp.Options) { o.Callers.Backend = "ldap" }, `--caller-backend "ldap"`},
		{"no reload interval", func(o *pdp.Options) { o.ReloadInterval = 0 }, "--reload-interval 0s: want a positive duration"},
		{"no cache entries", func(o *pdp.Options) { o.Callers.CacheMaxEntries = 0 }, "--caller-cache-max-entries 0: want a positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			tt.edit(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v; want %q", err, tt.want)
			}
		})
	}
	o := base()
	if err := o.Validate(); err != nil {
		t.Fatalf("the base options: %v", err)
	}
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCallerAuthOff(t *testing.T) {
	e := start(t, "off", func(o *pdp.Options) { o.Callers.AllowOff = true })
	code, body := e.post(t, "", readExample(t, "check_request_allow_rotate.json"), "application/json")
	rec, err := decision.Verify(body, decision.VerifyOptions{Profile: pdp.RecordProfile, Keys: e.keys})
	if code != 200 || err != nil || rec.Caller.Authenticated || rec.Caller.Reason != "caller_auth_off" || rec.Provenance.Mode != "off" {
		t.Fatalf("off: %d %v %+v", code, err, rec)
	}
}

// TestRunReloadsOnFileChange: a changed manifest is picked up by the
// running server without a signal.
func TestRunReloadsOnFileChange(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"manifest.json", "schema.cedarschema", "catalog.cedar"} {
		b, _ := os.ReadFile(filepath.Join(example, "policy", f))
		_ = os.WriteFile(filepath.Join(dir, f), b, 0o600)
	}
	addr, _ := loopback.Addr()
	e := start(t, "enforce", func(o *pdp.Options) { o.PolicyDir, o.Serve.Listen, o.ReloadInterval = dir, addr, 50*time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	readyz := func() string {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(readyz(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("readyz %q never said %q", readyz(), want)
			}
		}
	}
	waitFor("secrets-engine v2")
	time.Sleep(20 * time.Millisecond) // a new mtime
	_ = os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"package_id":"secrets-engine","policy_version":"v3"}`), 0o600)
	waitFor("secrets-engine v3")
}

// TestReloadFromConfigMapVolumes: the policy package and the registry as
// the kubelet lays out ConfigMap volumes (each file a link through ..data,
// updated by swapping ..data) — what deploy/charts/pdp mounts — are
// reloaded after an update without a restart.
func TestReloadFromConfigMapVolumes(t *testing.T) {
	root := t.TempDir()
	policy, err := tokenvolume.NewDir(filepath.Join(root, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	registry, err := tokenvolume.NewDir(filepath.Join(root, "registry"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range []string{"manifest.json", "schema.cedarschema", "catalog.cedar"} {
		files[f], _ = os.ReadFile(filepath.Join(example, "policy", f))
	}
	reg, _ := os.ReadFile(filepath.Join(example, "registry.json"))
	if err := policy.PublishFiles(files); err != nil {
		t.Fatal(err)
	}
	if err := registry.PublishFiles(map[string][]byte{"registry.json": reg}); err != nil {
		t.Fatal(err)
	}
	addr, _ := loopback.Addr()
	e := start(t, "enforce", func(o *pdp.Options) {
		o.PolicyDir, o.Registry = filepath.Join(root, "policy"), filepath.Join(root, "registry", "registry.json")
		o.Serve.Listen, o.ReloadInterval = addr, 50*time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), want) {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("readyz never said %q", want)
			}
		}
	}
	waitFor("secrets-engine v2")
	files["manifest.json"] = []byte(`{"package_id":"secrets-engine","policy_version":"v3"}`)
	if err := policy.PublishFiles(files); err != nil {
		t.Fatal(err)
	}
	waitFor("secrets-engine v3")
	// The registry's update is seen too: an empty registry makes the allow
	// example's subject unknown.
	if err := registry.PublishFiles(map[string][]byte{"registry.json": []byte("[]")}); err != nil {
		t.Fatal(err)
	}
	tok := e.token(t, "secrets-engine", "flex-auth", time.Now())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, body := e.post(t, tok, readExample(t, "check_request_allow_rotate.json"), "application/json")
		if status == http.StatusOK && strings.Contains(string(body), `"effect":"deny"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry update was never seen: %d %s", status, body)
		}
	}
}

// TestSigningKeyRotation walks the rotation procedure of docs/pdp.md, one
// reload per step: publish the new key (first in the file, so the old one,
// last, still signs), sign with it (last), retire the old one. A consumer
// that pinned the key set after the first step verifies every record
// throughout; a broken key file changes nothing. The same between the two
// algorithms a key file may hold: from ES256 (the default) to EdDSA and
// back.
func TestSigningKeyRotation(t *testing.T) {
	for _, algs := range [][2]jose.SignatureAlgorithm{{jose.ES256, jose.ES256}, {jose.ES256, jose.EdDSA}, {jose.EdDSA, jose.ES256}} {
		t.Run(string(algs[0])+" to "+string(algs[1]), func(t *testing.T) { testSigningKeyRotation(t, algs[0], algs[1]) })
	}
}

func testSigningKeyRotation(t *testing.T, oldAlg, newAlg jose.SignatureAlgorithm) {
	dir := t.TempDir()
	pem := func(name string, alg jose.SignatureAlgorithm) []byte {
		path := filepath.Join(dir, name)
		if err := decision.GenerateKeyFileFor(alg, path); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		return b
	}
	oldKey, newKey := pem("old.pem", oldAlg), pem("new.pem", newAlg)
	keyFile := filepath.Join(dir, "signing.pem")
	if err := os.WriteFile(keyFile, oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	// Each record its own signature: the test reads its JWS header.
	e := start(t, "enforce", func(o *pdp.Options) { o.SigningKeyFile, o.SignGroupMax = keyFile, 0 })
	oldKid := e.srv.Signer().KeyID()
	tok := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	allow := readExample(t, "check_request_allow_rotate.json")
	step := func(name string, keys []byte) {
		t.Helper()
		if err := os.WriteFile(keyFile, keys, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := e.srv.Reload(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	published := func() []string {
		resp, err := e.client.Get(e.url + "/.well-known/jwks.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var set jose.JSONWebKeySet
		if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
			t.Fatal(err)
		}
		var kids []string
		for _, k := range set.Keys {
			kids = append(kids, k.KeyID)
		}
		return kids
	}
	signedBy := func(keys jose.JSONWebKeySet) string {
		t.Helper()
		code, body := e.post(t, tok, allow, "application/json")
		if code != 200 {
			t.Fatalf("check: %d %s", code, body)
		}
		var s decision.Signed
		_ = json.Unmarshal(body, &s)
		h, err := jose.ParseSignedCompact(s.RecordJWS, decision.Algorithms)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decision.Verify(body, decision.VerifyOptions{Profile: pdp.RecordProfile, Keys: keys, Request: allow}); err != nil {
			t.Fatalf("a record does not verify against the pinned key set: %v", err)
		}
		for _, k := range keys.Keys {
			if k.KeyID == h.Signatures[0].Header.KeyID && k.Algorithm != h.Signatures[0].Header.Algorithm {
				t.Fatalf("record signed %s by key %s, published for %s", h.Signatures[0].Header.Algorithm, k.KeyID, k.Algorithm)
			}
		}
		return h.Signatures[0].Header.KeyID
	}

	step("publish", append(append([]byte{}, newKey...), oldKey...))
	pinned := e.srv.Signer().JWKS()
	newKid := pinned.Keys[0].KeyID
	if got := published(); len(got) != 2 || got[0] != newKid || got[1] != oldKid {
		t.Fatalf("after publishing, the JWKS holds %v; want [%s %s]", got, newKid, oldKid)
	}
	if kid := signedBy(pinned); kid != oldKid {
		t.Fatalf("after publishing, records are signed by %s; want the old key %s still", kid, oldKid)
	}
	step("sign", append(append([]byte{}, oldKey...), newKey...))
	if kid := signedBy(pinned); kid != newKid {
		t.Fatalf("after switching, records are signed by %s; want the new key %s", kid, newKid)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Reload(); err == nil || !strings.Contains(err.Error(), "--signing-key-file") {
		t.Fatalf("a broken key file: Reload = %v; want an error naming --signing-key-file", err)
	}
	if kid := signedBy(pinned); kid != newKid {
		t.Fatalf("after a failed reload, records are signed by %s; want %s still", kid, newKid)
	}
	step("retire", newKey)
	if got := published(); len(got) != 1 || got[0] != newKid {
		t.Fatalf("after retiring, the JWKS holds %v; want [%s]", got, newKid)
	}
	if kid := signedBy(pinned); kid != newKid {
		t.Fatalf("after retiring, records are signed by %s; want %s", kid, newKid)
	}
}

// sentenceOf is the sentence of the pdp's reason with word w.
func sentenceOf(t *testing.T, w string) string {
	t.Helper()
	for _, r := range pdp.Reasons() {
		if r.String() == w {
			return r.Sentence()
		}
	}
	t.Fatalf("the pdp gives no reason %q", w)
	return ""
}
