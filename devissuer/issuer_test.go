package devissuer_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/kit/malformed"
)

func open(t *testing.T, dir string, cfg devissuer.Config) *devissuer.Issuer {
	t.Helper()
	iss, err := devissuer.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

func mint(t *testing.T, iss *devissuer.Issuer, req devissuer.TokenRequest) devissuer.Token {
	t.Helper()
	tok, err := iss.Mint(req)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// payload decodes a token's claims without verifying, as a generic map, to
// check the exact wire shape.
func payload(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d segments", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestOpenKeepsStateAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, devissuer.Config{})
	b := open(t, dir, devissuer.Config{})
	if a.KeyID() != b.KeyID() || a.KeyID() == "" {
		t.Fatalf("kid changed across restart: %q vs %q", a.KeyID(), b.KeyID())
	}
	if a.Issuer() != devissuer.DefaultIssuer || a.Algorithm() != devissuer.ES256 {
		t.Fatalf("issuer %q alg %q", a.Issuer(), a.Algorithm())
	}
	for _, f := range []string{"signing-key.pem", "reviewer-token", "ca.crt", "ca.key", "issuer"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".pem") || strings.HasSuffix(f, ".key") || f == "reviewer-token" {
			if st.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s has mode %v; want no group or other access", f, st.Mode().Perm())
			}
		}
	}
	// A client registered without scopes is read back by the other (the
	// file is read strictly: its scopes are [], never null).
	if _, err := a.AddClient(devissuer.Client{ID: "c1", Subject: "s", Audiences: []string{"aud"}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddClient(devissuer.Client{ID: "c2", Subject: "s", Audiences: []string{"aud"}, Scopes: []string{"x"}}, 0); err != nil {
		t.Fatalf("the clients file one instance wrote, read by the other: %v", err)
	}
	// A token minted by one instance is accepted by the other.
	tok := mint(t, a, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"aud"}, Pod: "p", Node: "n"})
	if st := b.Review(tok.Token, []string{"aud"}); !st.Authenticated {
		t.Fatalf("restarted issuer refused its own token: %s", st.Error)
	}

	_, err := devissuer.Open(dir, devissuer.Config{Issuer: "https://other.example"})
	if err == nil || !strings.Contains(err.Error(), devissuer.DefaultIssuer) {
		t.Fatalf("conflicting issuer: err = %v", err)
	}
	_, err = devissuer.Open(dir, devissuer.Config{Algorithm: devissuer.RS256})
	if err == nil || !strings.Contains(err.Error(), "ES256") {
		t.Fatalf("conflicting algorithm: err = %v", err)
	}
}

func TestRS256(t *testing.T) {
	iss := open(t, t.TempDir(), devissuer.Config{Algorithm: devissuer.RS256, Issuer: "https://rsa.example"})
	tok := mint(t, iss, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"a"}})
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok.Token, ".")[0])
	if !strings.Contains(string(hdr), `"alg":"RS256"`) || !strings.Contains(string(hdr), iss.KeyID()) {
		t.Fatalf("header %s", hdr)
	}
	if st := iss.Review(tok.Token, []string{"a"}); !st.Authenticated {
		t.Fatal(st.Error)
	}
}

func TestMintShapes(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	iss := open(t, t.TempDir(), devissuer.Config{Now: func() time.Time { return now }})
	tests := []struct {
		name     string
		req      devissuer.TokenRequest
		wantPod  bool
		wantNode bool
	}{
		{"unbound", devissuer.TokenRequest{Namespace: "vmafx", ServiceAccount: "operator", Audiences: []string{"vmafx-controller"}}, false, false},
		{"bound to a scheduled pod", devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-monitor", Audiences: []string{"platform-connector"}, Pod: "gpu-monitor-abc", Node: "node-a"}, true, true},
		{"bound to an unscheduled pod", devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-monitor", Audiences: []string{"platform-connector"}, Pod: "pending-pod"}, true, false},
		{"bound to a node", devissuer.TokenRequest{Namespace: "kube-system", ServiceAccount: "agent", Audiences: []string{"a", "b"}, Node: "node-b"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Lifetime = 10 * time.Minute
			tok := mint(t, iss, tt.req)
			m := payload(t, tok.Token)
			for _, k := range []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "kubernetes.io"} {
				if _, ok := m[k]; !ok {
					t.Errorf("claim %q missing", k)
				}
			}
			if m["iss"] != devissuer.DefaultIssuer || m["sub"] != "system:serviceaccount:"+tt.req.Namespace+":"+tt.req.ServiceAccount {
				t.Errorf("iss %v sub %v", m["iss"], m["sub"])
			}
			if m["iat"] != float64(now.Unix()) || m["nbf"] != float64(now.Unix()) || m["exp"] != float64(now.Unix()+600) {
				t.Errorf("iat %v nbf %v exp %v", m["iat"], m["nbf"], m["exp"])
			}
			k := m["kubernetes.io"].(map[string]any)
			if k["namespace"] != tt.req.Namespace {
				t.Errorf("namespace %v", k["namespace"])
			}
			sa := k["serviceaccount"].(map[string]any)
			if sa["name"] != tt.req.ServiceAccount || sa["uid"] == "" {
				t.Errorf("serviceaccount %v", sa)
			}
			if _, ok := k["pod"]; ok != tt.wantPod {
				t.Errorf("pod claim present = %v; want %v", ok, tt.wantPod)
			}
			if _, ok := k["node"]; ok != tt.wantNode {
				t.Errorf("node claim present = %v; want %v", ok, tt.wantNode)
			}
			if tt.wantNode {
				if n := k["node"].(map[string]any); n["uid"] == "" {
					t.Errorf("node claim %v", n)
				}
			}
		})
	}
	t.Run("the same pod keeps its UID and node", func(t *testing.T) {
		a := mint(t, iss, devissuer.TokenRequest{Namespace: "x", ServiceAccount: "s", Audiences: []string{"a"}, Pod: "p1", Node: "n1"})
		b := mint(t, iss, devissuer.TokenRequest{Namespace: "x", ServiceAccount: "s", Audiences: []string{"a"}, Pod: "p1"})
		if a.Claims.Kubernetes.Pod.UID != b.Claims.Kubernetes.Pod.UID || b.Claims.Kubernetes.Node == nil || b.Claims.Kubernetes.Node.Name != "n1" {
			t.Fatalf("a %+v b %+v", a.Claims.Kubernetes, b.Claims.Kubernetes)
		}
		if a.Claims.ID == b.Claims.ID {
			t.Fatal("two tokens share a jti")
		}
		_, err := iss.Mint(devissuer.TokenRequest{Namespace: "x", ServiceAccount: "s", Audiences: []string{"a"}, Pod: "p1", Node: "n2"})
		if err == nil || !strings.Contains(err.Error(), "runs on node n1") {
			t.Fatalf("moving a pod: err = %v", err)
		}
	})
}

func TestMintRefusesWhatTokenRequestRefuses(t *testing.T) {
	iss := open(t, t.TempDir(), devissuer.Config{MaxLifetime: 2 * time.Hour})
	ok := devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"a"}}
	tests := []struct {
		name   string
		change func(*devissuer.TokenRequest)
		want   string // "" = accepted
	}{
		{"600 s is the minimum", func(r *devissuer.TokenRequest) { r.Lifetime = 600 * time.Second }, ""},
		{"599 s", func(r *devissuer.TokenRequest) { r.Lifetime = 599 * time.Second }, "less than 10 minutes"},
		{"fractional seconds", func(r *devissuer.TokenRequest) { r.Lifetime = 600*time.Second + time.Millisecond }, "whole number of seconds"},
		{"at the maximum", func(r *devissuer.TokenRequest) { r.Lifetime = 2 * time.Hour }, ""},
		{"over the maximum", func(r *devissuer.TokenRequest) { r.Lifetime = 2*time.Hour + time.Second }, "exceeds this issuer's maximum 2h0m0s"},
		{"no audience", func(r *devissuer.TokenRequest) { r.Audiences = nil }, "at least one audience"},
		{"empty audience", func(r *devissuer.TokenRequest) { r.Audiences = []string{""} }, "may not be empty"},
		{"bad namespace", func(r *devissuer.TokenRequest) { r.Namespace = "Bad_NS" }, `namespace "Bad_NS"`},
		{"bad service account", func(r *devissuer.TokenRequest) { r.ServiceAccount = "" }, "service account"},
		{"bad pod", func(r *devissuer.TokenRequest) { r.Pod = "Pod With Spaces" }, `pod "Pod With Spaces"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ok
			tt.change(&req)
			_, err := iss.Mint(req)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
	if _, err := devissuer.Open(t.TempDir(), devissuer.Config{MaxLifetime: time.Minute}); err == nil {
		t.Fatal("a maximum below 600 s was accepted")
	}
}

// served starts the issuer on loopback and returns it with an HTTPS client
// that trusts its CA.
func served(t *testing.T, iss *devissuer.Issuer) (*devissuer.Server, *http.Client) {
	t.Helper()
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, &http.Client{Transport: &http.Transport{TLSClientConfig: iss.TLSConfig()}, Timeout: 10 * time.Second}
}

func reviewerToken(t *testing.T, iss *devissuer.Issuer) string {
	b, err := os.ReadFile(iss.ReviewerTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// postReview sends a TokenReview over HTTPS as client-go would and decodes
// the answer.
func postReview(t *testing.T, c *http.Client, url, bearer, tok string, audiences ...string) (int, authv1.TokenReview) {
	t.Helper()
	body, _ := json.Marshal(authv1.TokenReview{
		TypeMeta: metav1TypeMeta(),
		Spec:     authv1.TokenReviewSpec{Token: tok, Audiences: audiences},
	})
	req, _ := http.NewRequest(http.MethodPost, url+devissuer.PathTokenReviews, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr authv1.TokenReview
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	return resp.StatusCode, tr
}

func TestTokenReviewOverHTTPS(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	dir := t.TempDir()
	iss := open(t, dir, devissuer.Config{Now: clock})
	srv, client := served(t, iss)
	reviewer := reviewerToken(t, iss)
	bound := mint(t, iss, devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-monitor", Audiences: []string{"platform-connector", "other"}, Pod: "gpu-monitor-1", Node: "node-a"})

	t.Run("authenticated with user, groups, extra and matched audiences", func(t *testing.T) {
		code, tr := postReview(t, client, srv.URL, reviewer, bound.Token, "platform-connector", "unrelated")
		if code != http.StatusCreated || !tr.Status.Authenticated {
			t.Fatalf("code %d status %+v", code, tr.Status)
		}
		if tr.Kind != "TokenReview" || tr.APIVersion != "authentication.k8s.io/v1" {
			t.Errorf("kind %q apiVersion %q", tr.Kind, tr.APIVersion)
		}
		u := tr.Status.User
		if u.Username != "system:serviceaccount:nvsentinel:gpu-monitor" || u.UID != bound.Claims.Kubernetes.ServiceAccount.UID {
			t.Errorf("user %+v", u)
		}
		wantGroups := []string{"system:serviceaccounts", "system:serviceaccounts:nvsentinel", "system:authenticated"}
		if strings.Join(u.Groups, ",") != strings.Join(wantGroups, ",") {
			t.Errorf("groups %v", u.Groups)
		}
		k := bound.Claims.Kubernetes
		wantExtra := map[string]string{
			authn.ExtraPodName: "gpu-monitor-1", authn.ExtraPodUID: k.Pod.UID,
			authn.ExtraNodeName: "node-a", authn.ExtraNodeUID: k.Node.UID,
			authn.ExtraCredentialID: "JTI=" + bound.Claims.ID,
		}
		for key, want := range wantExtra {
			if got := u.Extra[key]; len(got) != 1 || got[0] != want {
				t.Errorf("extra %s = %v; want [%s]", key, got, want)
			}
		}
		if strings.Join(tr.Status.Audiences, ",") != "platform-connector" {
			t.Errorf("audiences %v; want the intersection [platform-connector]", tr.Status.Audiences)
		}
	})

	other := open(t, t.TempDir(), devissuer.Config{}) // same issuer name, another key
	forged := mint(t, other, devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-monitor", Audiences: []string{"platform-connector"}})
	foreign := mint(t, open(t, t.TempDir(), devissuer.Config{Issuer: "https://elsewhere.example"}),
		devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"platform-connector"}})
	refusals := []struct {
		name, tok string
		auds      []string
		want      string
	}{
		{"wrong audience", bound.Token, []string{"flex-auth"}, `token audiences ["platform-connector","other"] is invalid for the target audiences ["flex-auth"]`},
		{"no audiences: the API audience is used", bound.Token, nil, "is invalid for the target audiences"},
		{"signature from another key", forged.Token, []string{"platform-connector"}, `signed by a key this validator does not know: kid "` + other.KeyID() + `" (this issuer signs with kid "` + iss.KeyID() + `"; was it minted with another --state-dir?)`},
		{"another key under this issuer's kid", resignedWithKid(t, forged.Token, iss.KeyID()), []string{"platform-connector"}, `signature does not verify with this issuer's key (kid "` + iss.KeyID() + `")`},
		{"another issuer", foreign.Token, []string{"platform-connector"}, "elsewhere.example"},
		{"not a JWT", "opaque", []string{"platform-connector"}, "not a JWT"},
		{"alg none", "eyJhbGciOiJub25lIn0." + strings.Split(bound.Token, ".")[1] + ".", []string{"platform-connector"}, "not a JWT"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			code, tr := postReview(t, client, srv.URL, reviewer, tt.tok, tt.auds...)
			if code != http.StatusCreated || tr.Status.Authenticated {
				t.Fatalf("code %d authenticated %v", code, tr.Status.Authenticated)
			}
			if !strings.Contains(tr.Status.Error, tt.want) || !strings.HasPrefix(tr.Status.Error, "[invalid bearer token, ") {
				t.Fatalf("error %q; want it to contain %q", tr.Status.Error, tt.want)
			}
			if tr.Status.User.Username != "" || len(tr.Status.Audiences) != 0 {
				t.Fatalf("a refused review carries an identity: %+v", tr.Status)
			}
		})
	}

	t.Run("lifetime edges with the API server's one-minute leeway", func(t *testing.T) {
		tok := mint(t, iss, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"a"}, Lifetime: 600 * time.Second, IssuedAt: now.Add(-10 * time.Minute)})
		exp := tok.Claims.Expiry.Time()
		cases := []struct {
			at   time.Time
			want bool
		}{
			{exp.Add(-time.Second), true},
			{exp.Add(time.Minute), true},
			{exp.Add(time.Minute + time.Second), false},
		}
		for _, c := range cases {
			now = c.at
			st := iss.Review(tok.Token, []string{"a"})
			if st.Authenticated != c.want {
				t.Errorf("at exp%+v: authenticated %v (%s); want %v", c.at.Sub(exp), st.Authenticated, st.Error, c.want)
			}
			if !c.want && !strings.Contains(st.Error, "has expired") {
				t.Errorf("error %q", st.Error)
			}
		}
		now = time.Now()
		future := mint(t, iss, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"a"}, IssuedAt: now.Add(5 * time.Minute)})
		if st := iss.Review(future.Token, []string{"a"}); st.Authenticated || !strings.Contains(st.Error, "not valid yet") {
			t.Errorf("future token: %+v", st)
		}
	})

	t.Run("a deleted pod's tokens stop authenticating", func(t *testing.T) {
		tok := mint(t, iss, devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-monitor", Audiences: []string{"platform-connector"}, Pod: "doomed", Node: "node-a"})
		if _, tr := postReview(t, client, srv.URL, reviewer, tok.Token, "platform-connector"); !tr.Status.Authenticated {
			t.Fatal(tr.Status.Error)
		}
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/api/v1/namespaces/nvsentinel/pods/doomed", nil)
		req.Header.Set("Authorization", "Bearer "+reviewer)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("DELETE pod: %s", resp.Status)
		}
		_, tr := postReview(t, client, srv.URL, reviewer, tok.Token, "platform-connector")
		if tr.Status.Authenticated || !strings.Contains(tr.Status.Error, "has been invalidated") {
			t.Fatalf("after delete: %+v", tr.Status)
		}
		// Recreated under the same name, the pod has a new UID: old tokens stay refused.
		fresh := mint(t, iss, devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-monitor", Audiences: []string{"platform-connector"}, Pod: "doomed", Node: "node-a"})
		if st := iss.Review(tok.Token, []string{"platform-connector"}); st.Authenticated {
			t.Fatal("old token accepted after the pod was recreated")
		}
		if st := iss.Review(fresh.Token, []string{"platform-connector"}); !st.Authenticated {
			t.Fatal(st.Error)
		}
		if err := iss.DeletePod("nvsentinel", "never-existed"); !errors.Is(err, devissuer.ErrNoSuchPod) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a pod deleted by another process is seen", func(t *testing.T) {
		tok := mint(t, iss, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"a"}, Pod: "p2"})
		if st := iss.Review(tok.Token, []string{"a"}); !st.Authenticated {
			t.Fatal(st.Error)
		}
		if err := open(t, dir, devissuer.Config{}).DeletePod("ns", "p2"); err != nil {
			t.Fatal(err)
		}
		if st := iss.Review(tok.Token, []string{"a"}); st.Authenticated {
			t.Fatal("still authenticated after another process deleted the pod")
		}
	})
}

func TestTokenReviewRequiresAnAuthorizedCaller(t *testing.T) {
	iss := open(t, t.TempDir(), devissuer.Config{})
	srv, client := served(t, iss)
	tok := mint(t, iss, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"a"}})
	// A token for the API audience authenticates to the API but may not review.
	apiTok := mint(t, iss, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{iss.Issuer()}})
	tests := []struct {
		name   string
		bearer string
		code   int
	}{
		{"no credentials", "", http.StatusUnauthorized},
		{"garbage credentials", "nope", http.StatusUnauthorized},
		{"a service account without the right", apiTok.Token, http.StatusForbidden},
		{"the reviewer", reviewerToken(t, iss), http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _ := postReview(t, client, srv.URL, tt.bearer, tok.Token, "a"); code != tt.code {
				t.Fatalf("code %d; want %d", code, tt.code)
			}
		})
	}
}

// TestDiscoveryAndJWKSVerifyOffline fetches discovery, follows jwks_uri and
// verifies a minted token with the published key, as an offline verifier
// would.
func TestDiscoveryAndJWKSVerifyOffline(t *testing.T) {
	iss := open(t, t.TempDir(), devissuer.Config{})
	srv, client := served(t, iss)
	resp, err := client.Get(srv.URL + devissuer.PathDiscovery)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if doc.Issuer != iss.Issuer() || doc.JWKSURI != srv.URL+devissuer.PathJWKS || len(doc.Algs) != 1 || doc.Algs[0] != "ES256" {
		t.Fatalf("discovery %+v", doc)
	}
	resp, err = client.Get(doc.JWKSURI)
	if err != nil {
		t.Fatal(err)
	}
	if cc := resp.Header.Get("Cache-Control"); !strings.Contains(cc, "max-age") {
		t.Errorf("Cache-Control %q", cc)
	}
	var set jose.JSONWebKeySet
	_ = json.NewDecoder(resp.Body).Decode(&set)
	resp.Body.Close()
	tok := mint(t, iss, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"a"}})
	parsed, err := jwt.ParseSigned(tok.Token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Key(parsed.Headers[0].KeyID)
	if len(keys) != 1 || keys[0].IsPublic() == false {
		t.Fatalf("JWKS has %d keys for kid %q", len(keys), parsed.Headers[0].KeyID)
	}
	var c devissuer.Claims
	if err := parsed.Claims(keys[0].Key, &c); err != nil {
		t.Fatalf("offline verification failed: %v", err)
	}
	if c.Subject != "system:serviceaccount:ns:sa" {
		t.Fatalf("sub %q", c.Subject)
	}
}

func TestServeWritesKubeconfig(t *testing.T) {
	iss := open(t, t.TempDir(), devissuer.Config{})
	srv, _ := served(t, iss)
	b, err := os.ReadFile(iss.KubeconfigFile())
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CAData string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				TokenFile string `json:"tokenFile"`
			} `json:"user"`
		} `json:"users"`
		CurrentContext string `json:"current-context"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		t.Fatal(err)
	}
	if len(kc.Clusters) != 1 || kc.Clusters[0].Cluster.Server != srv.URL || kc.Clusters[0].Cluster.CAData == "" ||
		len(kc.Users) != 1 || kc.Users[0].User.TokenFile != iss.ReviewerTokenFile() || kc.CurrentContext == "" {
		t.Fatalf("kubeconfig:\n%s", b)
	}
}

// resignedWithKid signs tok's payload with a new key under kid.
func resignedWithKid(t *testing.T, tok string, kid string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConcurrentOpenAgreesOnOneKey: an issuer starting while a token is
// minted from the same new state directory must end up with one key, or
// the served issuer refuses the minted token.
func TestConcurrentOpenAgreesOnOneKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	kids := make(chan string, 8)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			iss, err := devissuer.Open(dir, devissuer.Config{})
			if err != nil {
				errs <- err
				return
			}
			kids <- iss.KeyID() + " " + iss.CAFile()
		}()
	}
	var first string
	for range 8 {
		select {
		case err := <-errs:
			t.Fatal(err)
		case k := <-kids:
			if first == "" {
				first = k
			} else if k != first {
				t.Fatalf("two keys for one state directory: %s and %s", first, k)
			}
		}
	}
	last := open(t, dir, devissuer.Config{})
	if last.KeyID()+" "+last.CAFile() != first {
		t.Fatalf("the key on disk is not the one handed out: %s vs %s", last.KeyID(), first)
	}
}

// TestServeRefusesMalformedFraming: the dev issuer's HTTPS server
// answers every malformed HTTP/1.x framing (internal/kit/malformed) at
// once and closes its connection, and a well-framed pipelined pair of
// TokenReviews is answered whole.
func TestServeRefusesMalformedFraming(t *testing.T) {
	iss := open(t, t.TempDir(), devissuer.Config{})
	srv, _ := served(t, iss)
	addr := strings.TrimPrefix(srv.URL, "https://")
	review := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"x"}}`
	malformed.Check(t, malformed.TLSDialer(addr, iss.TLSConfig()), addr, "/apis/authentication.k8s.io/v1/tokenreviews", "Bearer "+reviewerToken(t, iss), review)
}
