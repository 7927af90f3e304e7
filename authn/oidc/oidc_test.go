package oidc_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/faults"
	"github.com/callerauth/callerauth/internal/forge"
	"github.com/callerauth/callerauth/token"
)

// idp is a tenant identity provider on loopback: discovery naming its
// issuer, and a JWKS whose keys a test can rotate.
type idp struct {
	issuer string
	url    string
	caFile string
	faults *faults.Handler
	mu     sync.Mutex
	keys   map[string]crypto.Signer
}

func newIDP(t testing.TB, issuer string) *idp {
	t.Helper()
	p := &idp{issuer: issuer, keys: map[string]crypto.Signer{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.issuer, "jwks_uri": p.url + "/jwks"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		var set jose.JSONWebKeySet
		for kid, k := range p.keys {
			alg := "ES256"
			switch k.(type) {
			case *rsa.PrivateKey:
				alg = "RS256"
			case ed25519.PrivateKey:
				alg = "EdDSA"
			}
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Public(), KeyID: kid, Algorithm: alg, Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	p.faults = faults.Wrap(mux)
	srv := httptest.NewTLSServer(p.faults)
	t.Cleanup(srv.Close)
	p.url = srv.URL
	p.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *idp) addKey(kid string, k crypto.Signer) {
	p.mu.Lock()
	p.keys[kid] = k
	p.mu.Unlock()
}

func ecKey() crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func (p *idp) config(aud ...string) oidc.IssuerConfig {
	return oidc.IssuerConfig{Issuer: p.issuer, DiscoveryURL: p.url, CAFile: p.caFile, Audiences: aud}
}

func claims(iss string, now time.Time, extra map[string]any) map[string]any {
	c := map[string]any{"iss": iss, "sub": "alice", "aud": []string{"vmafx-controller"}, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": "j-1"}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

func newAuth(t *testing.T, cfg oidc.Config) *oidc.Authenticator {
	t.Helper()
	a, err := oidc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestTenantsRolesAndRouting(t *testing.T) {
	now := time.Now()
	a, b := newIDP(t, "https://idp.tenant-a.example"), newIDP(t, "https://idp.tenant-b.example")
	ka, kb := ecKey(), ecKey()
	a.addKey("a1", ka)
	b.addKey("b1", kb)
	ca := a.config("vmafx-controller")
	ca.Tenant, ca.RolesClaim = "tenant-a", "roles"
	cb := b.config("vmafx-controller")
	cb.TenantClaim, cb.RolesClaim = "tenant", "scope"
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{ca, cb}})

	c, err := auth.Authenticate(context.Background(), forge.Sign(claims(a.issuer, now, map[string]any{"roles": []string{"vmafx:reader"}, "groups": []string{"ops"}}), ka, jose.ES256, "a1"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Username != "alice" || c.Tenant != "tenant-a" || fmt.Sprint(c.Roles) != "[vmafx:reader]" || fmt.Sprint(c.Groups) != "[ops]" ||
		c.Issuer != a.issuer || c.CredentialID != "JTI=j-1" || fmt.Sprint(c.Audiences) != "[vmafx-controller]" || c.Expiry.Unix() != now.Add(time.Hour).Unix() {
		t.Fatalf("caller %+v", c)
	}
	c, err = auth.Authenticate(context.Background(), forge.Sign(claims(b.issuer, now, map[string]any{"tenant": "tenant-b", "scope": "vmafx:reader vmafx:writer"}), kb, jose.ES256, "b1"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tenant != "tenant-b" || fmt.Sprint(c.Roles) != "[vmafx:reader vmafx:writer]" {
		t.Fatalf("caller %+v", c)
	}
	// Without the tenant claim the token states no tenant: verified, with
	// Tenant "", which a tenant-scoped service refuses tenant_missing (not
	// token_invalid: the token is good, the tenant is what is missing).
	c, err = auth.Authenticate(context.Background(), forge.Sign(claims(b.issuer, now, nil), kb, jose.ES256, "b1"))
	if err != nil || c.Tenant != "" {
		t.Fatalf("no tenant claim: %+v %v", c, err)
	}

	refusals := []struct {
		name string
		tok  string
		want string
	}{
		{"tenant A's key cannot sign for tenant B", forge.Sign(claims(b.issuer, now, map[string]any{"tenant": "tenant-b"}), ka, jose.ES256, "b1"), "signature does not verify"},
		{"unknown issuer", forge.Sign(claims("https://idp.tenant-c.example", now, nil), ka, jose.ES256, "a1"), "unknown issuer"},
		{"tenant claim not a string", forge.Sign(claims(b.issuer, now, map[string]any{"tenant": 5}), kb, jose.ES256, "b1"), "is not a string"},
		{"roles claim of the wrong type", forge.Sign(claims(a.issuer, now, map[string]any{"roles": 5}), ka, jose.ES256, "a1"), "neither a list"},
		{"no sub", forge.Sign(claims(a.issuer, now, map[string]any{"sub": ""}), ka, jose.ES256, "a1"), "no sub"},
		{"aud as a string, another service", forge.Sign(claims(a.issuer, now, map[string]any{"aud": "flex-auth"}), ka, jose.ES256, "a1"), "include none of"},
		{"no aud", forge.Sign(claims(a.issuer, now, map[string]any{"aud": []string{}}), ka, jose.ES256, "a1"), "include none of"},
		{"no exp", forge.Sign(map[string]any{"iss": a.issuer, "sub": "x", "aud": "vmafx-controller"}, ka, jose.ES256, "a1"), "no exp"},
		// RFC 7519 §2: a NumericDate is a JSON number. A quoted one, signed
		// by a trusted issuer, was read as a date (exp in 2286).
		{"exp as a string", forge.Sign(claims(a.issuer, now, map[string]any{"exp": "9999999999"}), ka, jose.ES256, "a1"), "not a NumericDate"},
		{"iat as a string", forge.Sign(claims(a.issuer, now, map[string]any{"iat": fmt.Sprint(now.Unix())}), ka, jose.ES256, "a1"), "not a NumericDate"},
		{"nbf as a string", forge.Sign(claims(a.issuer, now, map[string]any{"nbf": fmt.Sprint(now.Unix())}), ka, jose.ES256, "a1"), "not a NumericDate"},
		{"exp as null", forge.Sign(claims(a.issuer, now, map[string]any{"exp": nil}), ka, jose.ES256, "a1"), "not a NumericDate"},
		// RFC 7519 §4: claim names are case-sensitive. encoding/json matched
		// "EXP" to exp, so an issuer that signs a custom claim of that name
		// let it extend the token.
		{"EXP beside an expired exp", forge.SignRaw([]byte(`{"iss":"`+a.issuer+`","sub":"x","aud":"vmafx-controller","exp":`+fmt.Sprint(now.Add(-time.Hour).Unix())+`,"EXP":`+fmt.Sprint(now.Add(time.Hour).Unix())+`}`), ka, jose.ES256, "a1"), "expired"},
		{"Aud only", forge.SignRaw([]byte(`{"iss":"`+a.issuer+`","sub":"x","Aud":"vmafx-controller","exp":`+fmt.Sprint(now.Add(time.Hour).Unix())+`}`), ka, jose.ES256, "a1"), "include none of"},
		{"a claim named twice", forge.SignRaw([]byte(`{"iss":"`+a.issuer+`","sub":"x","aud":"vmafx-controller","exp":1,"exp":`+fmt.Sprint(now.Add(time.Hour).Unix())+`}`), ka, jose.ES256, "a1"), "more than once"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			_, err := auth.Authenticate(context.Background(), tt.tok)
			if authn.ReasonOf(err) != authn.TokenInvalid || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want token_invalid containing %q", err, tt.want)
			}
		})
	}
	t.Run("string aud is accepted", func(t *testing.T) {
		if _, err := auth.Authenticate(context.Background(), forge.Sign(claims(a.issuer, now, map[string]any{"aud": "vmafx-controller"}), ka, jose.ES256, "a1")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("tenant claim naming another tenant", func(t *testing.T) {
		cb.Tenant = "tenant-b"
		auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{cb}})
		_, err := auth.Authenticate(context.Background(), forge.Sign(claims(b.issuer, now, map[string]any{"tenant": "tenant-a"}), kb, jose.ES256, "b1"))
		if authn.ReasonOf(err) != authn.TokenInvalid || !strings.Contains(err.Error(), "serves tenant") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestAlgorithmAttacks(t *testing.T) {
	now := time.Now()
	p := newIDP(t, "https://idp.example")
	k := ecKey()
	p.addKey("k1", k)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p.addKey("r1", rk)
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}})
	c := claims(p.issuer, now, nil)
	good := forge.Sign(c, k, jose.ES256, "k1")
	if _, err := auth.Authenticate(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Authenticate(context.Background(), forge.Sign(c, rk, jose.RS256, "r1")); err != nil {
		t.Fatalf("RS256: %v", err)
	}
	tests := []struct {
		name string
		tok  string
	}{
		{"alg none", forge.AlgNone(c, "k1")},
		{"HS256 keyed with the EC public key", forge.HS256WithPublicKey(c, k.Public(), "k1")},
		{"HS256 keyed with the RSA public key", forge.HS256WithPublicKey(c, rk.Public(), "r1")},
		{"ES384 is not allowed by default", forge.Sign(c, mustEC384(), jose.ES384, "k1")},
		{"tampered claims", forge.WithClaims(good, claims(p.issuer, now, map[string]any{"sub": "admin"}))},
		{"flipped signature bit", forge.FlipSignature(good)},
		{"RSA key with the EC kid", forge.Sign(c, rk, jose.RS256, "k1")},
		{"truncated", good[:len(good)-10]},
		{"two segments", strings.Join(strings.Split(good, ".")[:2], ".")},
		{"garbage", "garbage"},
		{"oversize", strings.Repeat("a", token.MaxLength+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := auth.Authenticate(context.Background(), tt.tok)
			if authn.ReasonOf(err) != authn.TokenInvalid {
				t.Fatalf("err = %v; want token_invalid", err)
			}
		})
	}
}

func mustEC384() crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// TestKeyRotation: an unknown kid causes one refetch, rate limited; a key
// published later is picked up without a restart.
func TestKeyRotation(t *testing.T) {
	now := time.Now()
	clock := now
	p := newIDP(t, "https://idp.example")
	k1, k2 := ecKey(), ecKey()
	p.addKey("k1", k1)
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, RefreshMinInterval: 10 * time.Second, Now: func() time.Time { return clock }})
	c := claims(p.issuer, now, nil)
	if _, err := auth.Authenticate(context.Background(), forge.Sign(c, k1, jose.ES256, "k1")); err != nil {
		t.Fatal(err)
	}
	if n := p.faults.Count("/jwks"); n != 1 {
		t.Fatalf("%d JWKS fetches; want 1", n)
	}
	rotated := forge.Sign(c, k2, jose.ES256, "k2")
	clock = clock.Add(11 * time.Second)
	// Unknown kid: one refetch, still unknown.
	if _, err := auth.Authenticate(context.Background(), rotated); authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("err = %v", err)
	}
	if n := p.faults.Count("/jwks"); n != 2 {
		t.Fatalf("%d JWKS fetches; want 2", n)
	}
	// Many more unknown kids within the interval fetch nothing more.
	p.addKey("k2", k2)
	for range 20 {
		if _, err := auth.Authenticate(context.Background(), rotated); authn.ReasonOf(err) != authn.TokenInvalid {
			t.Fatalf("err = %v", err)
		}
	}
	if n := p.faults.Count("/jwks"); n != 2 {
		t.Fatalf("%d JWKS fetches within the interval; want 2", n)
	}
	clock = clock.Add(10 * time.Second)
	if _, err := auth.Authenticate(context.Background(), rotated); err != nil {
		t.Fatalf("rotated key not picked up: %v", err)
	}
	if n := p.faults.Count("/jwks"); n != 3 {
		t.Fatalf("%d JWKS fetches; want 3", n)
	}
	// The old key still verifies; discovery was fetched once.
	if _, err := auth.Authenticate(context.Background(), forge.Sign(c, k1, jose.ES256, "k1")); err != nil {
		t.Fatal(err)
	}
	if n := p.faults.Count("/.well-known/openid-configuration"); n != 1 {
		t.Fatalf("%d discovery fetches; want 1", n)
	}
}

func TestLifetime(t *testing.T) {
	now := time.Unix(1800000000, 0)
	clock := now
	p := newIDP(t, "https://idp.example")
	k := ecKey()
	p.addKey("k1", k)
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, Leeway: 30 * time.Second, Now: func() time.Time { return clock }})
	tok := forge.Sign(claims(p.issuer, now, nil), k, jose.ES256, "k1")
	exp := now.Add(time.Hour)
	tests := []struct {
		at time.Time
		ok bool
	}{
		{now.Add(-30 * time.Second), true}, // nbf within leeway
		{now.Add(-31 * time.Second), false},
		{exp.Add(-time.Second), true},
		{exp, false},
		{exp.Add(time.Second), false},
	}
	for _, tt := range tests {
		clock = tt.at
		_, err := auth.Authenticate(context.Background(), tok)
		if (err == nil) != tt.ok || (err != nil && authn.ReasonOf(err) != authn.TokenInvalid) {
			t.Errorf("at %v: err = %v; want ok=%v", tt.at.Sub(now), err, tt.ok)
		}
	}
}

func TestIssuerFailures(t *testing.T) {
	now := time.Now()
	k := ecKey()
	tests := []struct {
		name string
		mode faults.Mode
		want authn.Reason
	}{
		{"500", faults.Mode{Status: 500}, authn.ValidatorUnavailable},
		{"503", faults.Mode{Status: 503}, authn.ValidatorUnavailable},
		{"404", faults.Mode{Status: 404}, authn.ValidatorError},
		{"403", faults.Mode{Status: 403}, authn.ValidatorError},
		{"slow", faults.Mode{Delay: 3 * time.Second}, authn.ValidatorTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newIDP(t, "https://idp.example")
			p.addKey("k1", k)
			p.faults.Set(tt.mode)
			auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, Timeout: 300 * time.Millisecond})
			_, err := auth.Authenticate(context.Background(), forge.Sign(claims(p.issuer, now, nil), k, jose.ES256, "k1"))
			if got := authn.ReasonOf(err); got != tt.want {
				t.Fatalf("class %s (%v); want %s", got, err, tt.want)
			}
			// Recovery: the next request after the fault is cleared succeeds.
			p.faults.Set(faults.Mode{})
			time.Sleep(oidc.DefaultRefreshMinInterval / 10)
			if _, err := auth.Authenticate(context.Background(), forge.Sign(claims(p.issuer, now, nil), k, jose.ES256, "k1")); err != nil {
				t.Fatalf("after recovery: %v", err)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		lis, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := lis.Addr().String()
		lis.Close()
		auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: "https://idp.example", DiscoveryURL: "https://" + addr, Audiences: []string{"a"}}}})
		_, err := auth.Authenticate(context.Background(), forge.Sign(claims("https://idp.example", now, nil), k, jose.ES256, "k1"))
		if authn.ReasonOf(err) != authn.ValidatorUnavailable {
			t.Fatalf("err = %v", err)
		}
		if err := auth.Prefetch(context.Background()); authn.ReasonOf(err) != authn.ValidatorUnavailable {
			t.Fatalf("Prefetch: %v", err)
		}
	})
	t.Run("discovery names another issuer", func(t *testing.T) {
		p := newIDP(t, "https://impostor.example")
		p.addKey("k1", k)
		cfg := p.config("vmafx-controller")
		cfg.Issuer = "https://idp.example"
		auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{cfg}})
		_, err := auth.Authenticate(context.Background(), forge.Sign(claims("https://idp.example", now, nil), k, jose.ES256, "k1"))
		if authn.ReasonOf(err) != authn.ValidatorError || !strings.Contains(err.Error(), "impostor") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestConfigRefusals(t *testing.T) {
	tests := []struct {
		name string
		ic   oidc.IssuerConfig
		want string
	}{
		{"http issuer", oidc.IssuerConfig{Issuer: "http://idp", Audiences: []string{"a"}}, "not an https:// URL"},
		{"no audience", oidc.IssuerConfig{Issuer: "https://idp"}, "audiences"},
		{"HS256", oidc.IssuerConfig{Issuer: "https://idp", Audiences: []string{"a"}, Algorithms: []string{"HS256"}}, `algorithm "HS256" is not allowed`},
		{"none", oidc.IssuerConfig{Issuer: "https://idp", Audiences: []string{"a"}, Algorithms: []string{"none"}}, `algorithm "none" is not allowed`},
		{"bad CA file", oidc.IssuerConfig{Issuer: "https://idp", Audiences: []string{"a"}, CAFile: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"http discovery", oidc.IssuerConfig{Issuer: "https://idp", Audiences: []string{"a"}, DiscoveryURL: "http://x"}, "discoveryURL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{tt.ic}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
	if _, err := oidc.New(oidc.Config{}); err == nil {
		t.Error("no issuers accepted")
	}
	ic := oidc.IssuerConfig{Issuer: "https://idp", Audiences: []string{"a"}}
	if _, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{ic, ic}}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate issuer: %v", err)
	}
}

// TestDevIssuer verifies dev issuer tokens offline through its discovery,
// with the Kubernetes identity a TokenReview would report.
func TestDevIssuer(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: []string{"platform-connector"}}}})
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-monitor", Audiences: []string{"platform-connector"}, Pod: "p", Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := auth.Authenticate(context.Background(), tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	k := tok.Claims.Kubernetes
	if c.Username != "system:serviceaccount:nvsentinel:gpu-monitor" || c.UID != k.ServiceAccount.UID ||
		fmt.Sprint(c.Groups) != "[system:serviceaccounts system:serviceaccounts:nvsentinel system:authenticated]" ||
		c.PodName != "p" || c.PodUID != k.Pod.UID || c.NodeName != "n" || c.NodeUID != k.Node.UID || c.CredentialID != "JTI="+tok.Claims.ID {
		t.Fatalf("caller %+v", c)
	}
	// Offline verification cannot see revocation.
	if err := iss.DeletePod("nvsentinel", "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Authenticate(context.Background(), tok.Token); err != nil {
		t.Fatalf("offline verification refused a deleted pod's token (it cannot know): %v", err)
	}
}
