package guard_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/guard"
)

// TestSystemBinding runs the PDP specification's positive test and N1–N4, and the system
// binding, against real tokens from the dev issuer verified by TokenReview,
// through the HTTP middleware of a real server, in enforce and warn.
func TestSystemBinding(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	auth, err := kube.New(kube.Config{Kubeconfig: iss.KubeconfigFile(), Audiences: []string{"flex-auth"}})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(ns, sa, aud string, issuedAt time.Time) string {
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: ns, ServiceAccount: sa, Audiences: []string{aud}, Lifetime: 10 * time.Minute, IssuedAt: issuedAt})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	good := mint("secrets-engine", "secrets-engine", "flex-auth", time.Time{})
	rows := []struct {
		name      string
		header    []string
		system    string
		enforce   int
		violation string
	}{
		{"positive: correct identity, audience and lifetime reach policy", bearerOf(good), "secrets-engine", 200, ""},
		{"N1: no Authorization header → 401", nil, "secrets-engine", 401, "token_missing"},
		{"N2: a valid token for the wrong service account → 403 principal cannot represent system",
			bearerOf(mint("secrets-engine", "default", "flex-auth", time.Time{})), "secrets-engine", 403, "principal_cannot_represent_system"},
		{"N3: a token minted for another audience → 401", bearerOf(mint("secrets-engine", "secrets-engine", "https://kubernetes.default.svc", time.Time{})), "secrets-engine", 401, "token_invalid"},
		{"N4: a token past exp → 401 (TokenReview refuses)", bearerOf(mint("secrets-engine", "secrets-engine", "flex-auth", time.Now().Add(-20*time.Minute))), "secrets-engine", 401, "token_invalid"},
		{"binding is by exact string: a similar principal is refused", bearerOf(mint("secrets-engine", "secrets-engine-2", "flex-auth", time.Time{})), "secrets-engine", 403, "principal_cannot_represent_system"},
		{"a system with no binding is refused", bearerOf(good), "ops-warden", 403, "principal_cannot_represent_system"},
		{"a malformed Authorization → 401", []string{"Bearer " + good, "Bearer " + good}, "secrets-engine", 401, "malformed_credentials"},
	}
	for _, mode := range []guard.Mode{guard.Enforce, guard.Audit} {
		t.Run(string(mode), func(t *testing.T) {
			g, reg := newGuardPrefix(t, "flex_auth", guard.Config{Mode: mode, Authenticator: auth.Layer(),
				Rule: binding.SystemBinding(map[string]string{"secrets-engine": "system:serviceaccount:secrets-engine:secrets-engine"})})
			reached := 0
			pdp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached++
				v, _ := guard.FromContext(r.Context())
				// The record says what enforce would have done.
				_ = json.NewEncoder(w).Encode(map[string]string{"effect": "allow", "caller_auth": v.Reason.String()})
			})
			extract := func(r *http.Request) (binding.Request, error) {
				b, err := io.ReadAll(r.Body)
				if err != nil {
					return binding.Request{}, err
				}
				r.Body = io.NopCloser(bytes.NewReader(b))
				var body struct{ System string }
				err = json.Unmarshal(b, &body)
				return binding.Request{System: body.System}, err
			}
			hs := httptest.NewTLSServer(g.Middleware(extract)(pdp))
			defer hs.Close()
			for _, r := range rows {
				before := counters(t, reg)
				req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/check", strings.NewReader(`{"system":"`+r.system+`"}`))
				for _, h := range r.header {
					req.Header.Add("Authorization", h)
				}
				n := reached
				resp, err := hs.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body map[string]string
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				want := r.enforce
				if mode == guard.Audit {
					want = 200 // under warn all four reach policy
				}
				if resp.StatusCode != want || (reached > n) != (want == 200) {
					t.Errorf("%s: status %d, reached policy %v; want %d", r.name, resp.StatusCode, reached > n, want)
					continue
				}
				if want != 200 && (body["reason"] != r.violation || body["error"] != sentenceOf(t, r.violation) || len(body) != 2) {
					t.Errorf("%s: body %v; want reason %q and its sentence, nothing else", r.name, body, r.violation)
				}
				if want == 200 && body["caller_auth"] != r.violation {
					t.Errorf("%s: warn records %q; want %q", r.name, body["caller_auth"], r.violation)
				}
				d := deltas(before, counters(t, reg))
				if r.violation != "" && d["flex_auth_auth_violations_total{"+r.violation+"}"] != 1 || r.violation == "" && len(d) != 0 {
					t.Errorf("%s: counter deltas %v", r.name, d)
				}
			}
		})
	}
}
