package proxy

// The signed identity assertion (--identity-assertion-audience): a short
// JWT, signed by the proxy, that tells the upstream who called — so that
// an upstream reachable by more than the proxy can tell a header the
// proxy set from one forged on the way.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/reason"
)

// AssertionHeader carries the assertion to the upstream; a client's is
// always removed.
const AssertionHeader = "X-Callerauth-Identity"

// PathJWKS is where the metrics listener publishes the assertion's keys.
const PathJWKS = "/.well-known/jwks.json"

// AssertionProfile is the assertion's JWS type (typ header): a verifier
// insists on it, so that no other token of the same keys is taken for one.
var AssertionProfile = decision.Profile{Schema: "callerauth.identity-assertion.v1", Type: "callerauth-identity+jwt"}

// AssertionIssuer is the assertion's iss claim.
const AssertionIssuer = "callerauth-proxy"

// Assertion limits.
const (
	DefaultAssertionTTL = 30 * time.Second
	MaxAssertionTTL     = 10 * time.Minute
)

// asserter signs the assertions.
type asserter struct {
	signer   *decision.Signer
	audience string
	ttl      time.Duration
	now      func() time.Time
	jwks     []byte
}

// newAsserter signs with the keys of keyFile (the last signs, all are
// published), or, with none, a P-256 key made now and held in memory only.
func newAsserter(audience, keyFile string, ttl time.Duration) (*asserter, error) {
	var keys []crypto.Signer
	if keyFile != "" {
		k, err := decision.LoadKeyFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("proxy: --identity-assertion-key-file: %w", err)
		}
		keys = k
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("proxy: identity assertion key: %w", err)
		}
		keys = []crypto.Signer{k}
	}
	s, err := decision.NewSigner(AssertionProfile, keys...)
	if err != nil {
		return nil, fmt.Errorf("proxy: --identity-assertion-key-file: %w", err)
	}
	jwks, err := json.Marshal(s.JWKS())
	if err != nil {
		return nil, err
	}
	return &asserter{signer: s, audience: audience, ttl: ttl, now: time.Now, jwks: jwks}, nil
}

// AuditRefusalHeader tells the upstream that --caller-auth-mode audit let
// through a request the proxy would have refused, and why (the reason,
// such as rbac_denied); the assertion carries it as its audit_refusal
// claim. A client's is always removed.
const AuditRefusalHeader = "X-Callerauth-Audit-Refusal"

// assert signs what the proxy verified of c for one request: the method
// and the target it made — path and query, as the client sent them
// (htm, htu; DPoP's htu leaves the query out, this one binds it) — so
// that an assertion taken from one request is worth nothing on another,
// and the refusal audit let through (audit_refusal), if any.
func (a *asserter) assert(c *authn.Caller, refusal reason.Reason, r *http.Request) (string, error) {
	var id [16]byte
	_, _ = rand.Read(id[:])
	now := a.now()
	claims := map[string]any{
		"iss": AssertionIssuer, "aud": a.audience, "sub": c.Username,
		"iat": now.Unix(), "exp": now.Add(a.ttl).Unix(), "jti": base64.RawURLEncoding.EncodeToString(id[:]),
		"htm": r.Method, "htu": r.URL.RequestURI(),
	}
	if !refusal.IsZero() {
		claims["audit_refusal"] = refusal.String()
	}
	if c.UID != "" {
		claims["uid"] = c.UID
	}
	if len(c.Groups) > 0 {
		claims["groups"] = c.Groups
	}
	if len(c.Extra) > 0 {
		claims["extra"] = c.Extra
	}
	return a.signer.SignClaims(claims)
}

// serveJWKS publishes the keys the assertions are signed with.
func (a *asserter) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(a.jwks)
}
