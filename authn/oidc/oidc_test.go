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
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/forge"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/reason"
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
	extra  []json.RawMessage // raw entries served beside the keys
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
		var raw struct {
			Keys []json.RawMessage `json:"keys"`
		}
		for _, k := range set.Keys {
			b, _ := k.MarshalJSON()
			raw.Keys = append(raw.Keys, b)
		}
		raw.Keys = append(raw.Keys, p.extra...)
		_ = json.NewEncoder(w).Encode(raw)
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

func (p *idp) removeKey(kid string) {
	p.mu.Lock()
	delete(p.keys, kid)
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
	// Unknown kid: one refetch, still unknown: refused, but uncacheable.
	_, err := auth.Authenticate(context.Background(), rotated)
	if authn.ReasonOf(err) != authn.TokenInvalid || authn.Cacheable(err) {
		t.Fatalf("err = %v (cacheable %v); want an uncacheable token_invalid", err, authn.Cacheable(err))
	}
	if n := p.faults.Count("/jwks"); n != 2 {
		t.Fatalf("%d JWKS fetches; want 2", n)
	}
	// Published now; within the interval the keys fetched hold no such
	// kid: signing_key_unknown, retryable, never cached and never failed
	// open (on ae46db4 validator_unavailable, which fail-open would have
	// let through), and no fetch.
	p.addKey("k2", k2)
	for range 20 {
		_, err := auth.Authenticate(context.Background(), rotated)
		if authn.ReasonOf(err) != authn.SigningKeyUnknown || authn.Cacheable(err) || authn.SaysNothingAboutCaller(authn.ReasonOf(err)) || !strings.Contains(err.Error(), `no key with kid "k2"`) {
			t.Fatalf("err = %v (cacheable %v); want an uncacheable signing_key_unknown naming the kid", err, authn.Cacheable(err))
		}
	}
	if n := p.faults.Count("/jwks"); n != 2 {
		t.Fatalf("%d JWKS fetches within the interval; want 2", n)
	}
	if s := auth.Stats(); s.UnknownKid != 20 {
		t.Fatalf("stats %+v", s)
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

// TestRotationRightAfterAFetch: the probe's case — a key published 2 s
// after the last JWKS fetch. Its tokens were refused token_invalid and
// negative-cached at +2 s and +11 s; now +2 s is signing_key_unknown
// (retryable, never cached; not the validator's failure, which fail-open
// would let through) and +11 s refetches and accepts.
func TestRotationRightAfterAFetch(t *testing.T) {
	now := time.Now()
	clock := now
	p := newIDP(t, "https://idp.example")
	k1, k2 := ecKey(), ecKey()
	p.addKey("k1", k1)
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, Now: func() time.Time { return clock }})
	cache := authn.NewCache(auth.Layer(), authn.CacheConfig{TTL: time.Minute, NegativeTTL: 10 * time.Second, Now: func() time.Time { return clock }})
	c := claims(p.issuer, now, nil)
	if _, err := cache.Authenticate(context.Background(), forge.Sign(c, k1, jose.ES256, "k1")); err != nil {
		t.Fatal(err)
	}
	p.addKey("k2", k2)
	rotated := forge.Sign(c, k2, jose.ES256, "k2")
	clock = clock.Add(2 * time.Second)
	if _, err := cache.Authenticate(context.Background(), rotated); authn.ReasonOf(err) != authn.SigningKeyUnknown {
		t.Fatalf("+2 s: %v; want signing_key_unknown", err)
	}
	clock = clock.Add(9 * time.Second)
	if _, err := cache.Authenticate(context.Background(), rotated); err != nil {
		t.Fatalf("+11 s: %v; want accepted", err)
	}
}

// TestStaleKeys: a key removed from the JWKS is refused once the keys are
// MaxKeyAge old and fetched again; while every fetch fails the last keys
// are trusted for MaxStaleKeys, then verification is validator_unavailable
// (counted). Before: accepted 30 minutes after removal, and after 30 days of
// 503.
func TestStaleKeys(t *testing.T) {
	now := time.Now()
	clock := now
	p := newIDP(t, "https://idp.example")
	k1, k2 := ecKey(), ecKey()
	p.addKey("k1", k1)
	p.addKey("k2", k2)
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, MaxKeyAge: 5 * time.Minute, MaxStaleKeys: time.Hour,
		Now: func() time.Time { return clock }})
	c := claims(p.issuer, now, map[string]any{"exp": now.Add(60 * 24 * time.Hour).Unix()})
	t1, t2 := forge.Sign(c, k1, jose.ES256, "k1"), forge.Sign(c, k2, jose.ES256, "k2")
	for _, tok := range []string{t1, t2} {
		if _, err := auth.Authenticate(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	p.removeKey("k1")
	clock = clock.Add(30 * time.Minute)
	// The keys are fetched again; k1 is gone: refused (signing_key_unknown,
	// retryable, while a refetch may not run yet, then token_invalid).
	if _, err := auth.Authenticate(context.Background(), t1); authn.ReasonOf(err) != authn.SigningKeyUnknown {
		t.Fatalf("a removed key 30 min later: %v; want it refused", err)
	}
	clock = clock.Add(10 * time.Second)
	if _, err := auth.Authenticate(context.Background(), t1); authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("a removed key after a refetch: %v; want token_invalid", err)
	}
	if _, err := auth.Authenticate(context.Background(), t2); err != nil {
		t.Fatalf("the key still published: %v", err)
	}
	// The JWKS endpoint answers 503 from now on.
	p.faults.Set(faults.Mode{Status: http.StatusServiceUnavailable})
	clock = clock.Add(59 * time.Minute)
	if _, err := auth.Authenticate(context.Background(), t2); err != nil {
		t.Fatalf("within MaxStaleKeys of the last fetch: %v", err)
	}
	clock = clock.Add(2 * time.Minute)
	if _, err := auth.Authenticate(context.Background(), t2); authn.ReasonOf(err) != authn.ValidatorUnavailable || !strings.Contains(err.Error(), "last fetched") {
		t.Fatalf("past MaxStaleKeys: %v; want validator_unavailable", err)
	}
	clock = clock.Add(30 * 24 * time.Hour)
	if _, err := auth.Authenticate(context.Background(), t2); authn.ReasonOf(err) != authn.ValidatorUnavailable {
		t.Fatalf("30 days of 503: %v", err)
	}
	if s := auth.Stats(); s.StaleRefusals != 2 || s.FetchFailures == 0 {
		t.Fatalf("stats %+v", s)
	}
	// The issuer comes back: accepted again.
	p.faults.Set(faults.Mode{})
	clock = clock.Add(10 * time.Second)
	if _, err := auth.Authenticate(context.Background(), t2); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

// TestUnusableKeysAreIgnored: RFC 7517 §5 — entries the verifier cannot
// use (X25519, an unknown kty, secp256k1, RSA without e, a bad x5c, an RSA
// key under 2048 bits) are ignored, each logged and counted once, and the
// good key beside them verifies. Before, any one of them made every token
// of the issuer validator_error. Two keys may share a kid (RFC 7517 §4.5):
// each that fits is tried.
func TestUnusableKeysAreIgnored(t *testing.T) {
	now := time.Now()
	p := newIDP(t, "https://idp.example")
	good := ecKey()
	p.addKey("good", good)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	smallJWK, _ := jose.JSONWebKey{Key: small.Public(), KeyID: "small", Algorithm: "RS256", Use: "sig"}.MarshalJSON()
	p.extra = []json.RawMessage{
		json.RawMessage(`{"kty":"OKP","crv":"X25519","x":"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo","kid":"x25519"}`),
		json.RawMessage(`{"kty":"FOO","kid":"foo"}`),
		json.RawMessage(`{"kty":"EC","crv":"secp256k1","x":"gwmxHfa-HDYBnBsQ_C2tAO4fWkG3lb4OZHeJBDb0-2M","y":"gVaRqWLqyD5Ma3bAqFp-IH8UMn-BDSzw4ww5KGL8nTM","kid":"k1"}`),
		json.RawMessage(`{"kty":"RSA","n":"` + strings.Repeat("A", 342) + `","kid":"no-e"}`),
		json.RawMessage(`{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0","x5c":["bm90IGEgY2VydA"],"kid":"bad-x5c"}`),
		smallJWK,
	}
	var logs strings.Builder
	clock := now
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Now: func() time.Time { return clock }})
	c := claims(p.issuer, now, nil)
	for range 3 {
		if _, err := auth.Authenticate(context.Background(), forge.Sign(c, good, jose.ES256, "good")); err != nil {
			t.Fatalf("the good key beside unusable ones: %v", err)
		}
	}
	if s := auth.Stats(); s.KeysIgnored != 6 {
		t.Fatalf("ignored %d; want 6 (each once)\n%s", s.KeysIgnored, logs.String())
	}
	if n := strings.Count(logs.String(), "ignoring a JWKS entry"); n != 6 || !strings.Contains(logs.String(), "RFC 7518 §3.3 requires 2048") {
		t.Fatalf("%d log lines:\n%s", n, logs.String())
	}
	// A token signed by the 1024-bit key is refused: its kid is not among
	// the keys, even after a refetch.
	clock = clock.Add(10 * time.Second)
	if _, err := auth.Authenticate(context.Background(), forge.Sign(c, small, jose.RS256, "small")); authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("a 1024-bit RSA key: %v", err)
	}
}

func TestTwoKeysOneKid(t *testing.T) {
	now := time.Now()
	p := newIDP(t, "https://idp.example")
	ec := ecKey()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p.addKey("ec", ec)
	rsaJWK, _ := jose.JSONWebKey{Key: rk.Public(), KeyID: "shared", Algorithm: "RS256", Use: "sig"}.MarshalJSON()
	ecJWK, _ := jose.JSONWebKey{Key: ec.Public(), KeyID: "shared", Algorithm: "ES256", Use: "sig"}.MarshalJSON()
	p.extra = []json.RawMessage{rsaJWK, ecJWK} // the RSA key first
	cfg := p.config("vmafx-controller")
	cfg.Algorithms = []string{"RS256", "ES256"}
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{cfg}})
	c := claims(p.issuer, now, nil)
	for name, tok := range map[string]string{"RS256": forge.Sign(c, rk, jose.RS256, "shared"), "ES256": forge.Sign(c, ec, jose.ES256, "shared")} {
		if _, err := auth.Authenticate(context.Background(), tok); err != nil {
			t.Errorf("%s under the shared kid: %v", name, err)
		}
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
		want reason.Reason
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
		addr, _ := loopback.Addr()
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

// TestWhiteSpaceInSegments: CR, LF, a space or a tab inside any segment is
// refused by the Authenticator — base64url has no white space (RFC 7515
// §2), although Go's decoder skips \r and \n (a token with \n in its
// signature segment verified before).
func TestWhiteSpaceInSegments(t *testing.T) {
	now := time.Now()
	p := newIDP(t, "https://idp.example")
	k := ecKey()
	p.addKey("k1", k)
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}})
	tok := forge.Sign(claims(p.issuer, now, nil), k, jose.ES256, "k1")
	if _, err := auth.Authenticate(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	segs := strings.Split(tok, ".")
	for seg := range 3 {
		for _, ws := range []string{"\r", "\n", "\r\n", " ", "\t"} {
			s := slices.Clone(segs)
			s[seg] = s[seg][:4] + ws + s[seg][4:]
			if _, err := auth.Authenticate(context.Background(), strings.Join(s, ".")); authn.ReasonOf(err) != authn.TokenInvalid {
				t.Errorf("segment %d with %q: %v; want token_invalid", seg, ws, err)
			}
		}
	}
}

// TestDocumentsAreIJSON: a discovery document or a key set that is not
// I-JSON — a member twice, invalid UTF-8 — is refused as validator_error
// rather than read as encoding/json would (keeping the last of two
// members, replacing bad bytes), which RFC 7517 §4 and §5 allow; an
// unknown member is ignored, as they say. A document over the bound is
// refused naming it.
func TestDocumentsAreIJSON(t *testing.T) {
	now := time.Now()
	k := ecKey()
	key, err := jose.JSONWebKey{Key: k.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	jwks := `{"keys":[` + string(key) + `]}`
	for _, c := range []struct {
		name, discovery, keys string
		want                  string // "" for accepted
	}{
		{"unknown members ignored", `,"x-vendor":{"a":1}}`, strings.Replace(jwks, `{"keys":`, `{"x-vendor":null,"keys":`, 1), ""},
		{"issuer twice in discovery", `,"issuer":"https://idp.example"}`, jwks, "appears more than once"},
		{"keys twice in the key set", `}`, strings.TrimSuffix(jwks, "}") + `,"keys":[]}`, "appears more than once"},
		{"a key's member twice", `}`, strings.Replace(jwks, `"kid":"k1"`, `"kid":"k1","kid":"k2"`, 1), "appears more than once"},
		{"invalid UTF-8", `,"name":"` + "\xff" + `"}`, jwks, "UTF-8"},
		{"over the bound", `,"pad":"` + strings.Repeat("x", 1<<20) + `"}`, jwks, "larger than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var url string
			mux := http.NewServeMux()
			mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, `{"issuer":"https://idp.example","jwks_uri":"`+url+`/keys"`+c.discovery)
			})
			mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, c.keys) })
			srv := httptest.NewTLSServer(mux)
			defer srv.Close()
			url = srv.URL
			caFile := filepath.Join(t.TempDir(), "ca.pem")
			_ = os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
			auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: "https://idp.example", DiscoveryURL: url, CAFile: caFile, Audiences: []string{"vmafx-controller"}}}})
			_, err := auth.Authenticate(context.Background(), forge.Sign(claims("https://idp.example", now, nil), k, jose.ES256, "k1"))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (authn.ReasonOf(err) != authn.ValidatorError || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err = %v (%s); want validator_error naming %q", err, authn.ReasonOf(err), c.want)
			}
		})
	}
}
