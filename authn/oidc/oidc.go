package oidc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/token"
)

// Authenticator verifies tokens offline against its issuers' keys. Create
// one with [New]; it is safe for concurrent use.
type Authenticator struct {
	cfg     Config
	issuers map[string]*issuer
}

type issuer struct {
	cfg  *IssuerConfig
	algs []jose.SignatureAlgorithm
	keys *keySet
}

var _ authn.Authenticator = (*Authenticator)(nil)

// New validates the configuration and returns the authenticator. Keys are
// fetched on first use (or by [Authenticator.Prefetch]), so an issuer that
// is down at start-up fails requests as validator_unavailable rather than
// stopping the service.
func New(cfg Config) (*Authenticator, error) {
	cfg.Issuers = slices.Clone(cfg.Issuers)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Authenticator{cfg: cfg, issuers: map[string]*issuer{}}
	for i := range a.cfg.Issuers {
		ic := &a.cfg.Issuers[i]
		client, err := httpClient(ic)
		if err != nil {
			return nil, fmt.Errorf("oidc: issuer %q: %w", ic.Issuer, err)
		}
		ks := &keySet{ic: ic, cfg: &a.cfg, client: client, jwksURL: ic.JWKSURL}
		if ic.BearerTokenFile != "" {
			ks.bearer = token.File(ic.BearerTokenFile)
		}
		iss := &issuer{cfg: ic, keys: ks}
		for _, alg := range ic.Algorithms {
			iss.algs = append(iss.algs, jose.SignatureAlgorithm(alg))
		}
		a.issuers[ic.Issuer] = iss
	}
	return a, nil
}

// Prefetch fetches every issuer's keys now, returning the first failure.
func (a *Authenticator) Prefetch(ctx context.Context) error {
	for _, iss := range a.issuers {
		if err := iss.keys.refresh(ctx); err != nil {
			return fmt.Errorf("oidc: issuer %q: %w", iss.cfg.Issuer, err)
		}
	}
	return nil
}

// claims is the payload callerauth reads.
type claims struct {
	token.Claims
	Kube *kubernetesClaim `json:"kubernetes.io"`
}

type kubernetesClaim struct {
	Namespace      string `json:"namespace"`
	ServiceAccount *ref   `json:"serviceaccount"`
	Pod            *ref   `json:"pod"`
	Node           *ref   `json:"node"`
}

type ref struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// Authenticate verifies the token.
func (a *Authenticator) Authenticate(ctx context.Context, tok string) (*authn.Caller, error) {
	if tok == "" || len(tok) > token.MaxLength {
		return nil, authn.Fail(authn.TokenInvalid, "token is empty or longer than %d bytes", token.MaxLength)
	}
	// Decode the claims once, before verification, to route the token to
	// its issuer; they are trusted only once the signature over these very
	// bytes has verified.
	raw, c, err := decodePayload(tok)
	if err != nil {
		return nil, err
	}
	iss, ok := a.issuers[c.Issuer]
	if !ok {
		return nil, authn.Fail(authn.TokenInvalid, "unknown issuer %q", c.Issuer)
	}
	jws, err := jose.ParseSignedCompact(tok, iss.algs)
	if err != nil {
		return nil, authn.Fail(authn.TokenInvalid, "malformed JWT or algorithm not allowed for %s (%s): %v", iss.cfg.Issuer, algNames(iss.algs), err)
	}
	hdr := jws.Signatures[0].Protected
	keys, err := iss.keys.lookup(ctx, hdr.KeyID)
	if err != nil {
		return nil, err
	}
	payload, err := verify(jws, keys, hdr.Algorithm)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(payload, raw) {
		return nil, authn.Fail(authn.TokenInvalid, "verified payload differs from the decoded one")
	}
	return a.caller(iss, c, payload)
}

// decodePayload base64-decodes and parses the payload of a compact JWS.
func decodePayload(tok string) ([]byte, *claims, error) {
	raw, err := token.Payload(tok)
	if err != nil {
		return nil, nil, authn.Fail(authn.TokenInvalid, "%v", err)
	}
	var c claims
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, authn.Fail(authn.TokenInvalid, "token is not a JWT: claims: %v", err)
	}
	return raw, &c, nil
}

func verify(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, alg string) ([]byte, error) {
	for _, key := range keys {
		if key.Algorithm != "" && key.Algorithm != alg {
			continue
		}
		if payload, err := jws.Verify(key.Key); err == nil {
			return payload, nil
		}
	}
	return nil, authn.Fail(authn.TokenInvalid, "signature does not verify with the issuer's keys (alg %s, kid %q)", alg, jws.Signatures[0].Protected.KeyID)
}

func (a *Authenticator) caller(iss *issuer, c *claims, payload []byte) (*authn.Caller, error) {
	if c.Issuer != iss.cfg.Issuer {
		return nil, authn.Fail(authn.TokenInvalid, "iss %q is not %q", c.Issuer, iss.cfg.Issuer)
	}
	if err := authn.CheckLifetime(&c.Claims, a.cfg.Now(), a.cfg.Leeway); err != nil {
		return nil, err
	}
	matched := authn.Intersect(iss.cfg.Audiences, c.Audience)
	if len(matched) == 0 {
		return nil, authn.Fail(authn.TokenInvalid, "token audiences %q include none of %q", []string(c.Audience), iss.cfg.Audiences)
	}
	if c.Subject == "" {
		return nil, authn.Fail(authn.TokenInvalid, "token has no sub")
	}
	caller := &authn.Caller{
		Username: c.Subject, Audiences: matched, Issuer: c.Issuer,
		IssuedAt: c.Issued(), Expiry: c.ExpiresAt(), Tenant: iss.cfg.Tenant,
	}
	if c.ID != "" {
		caller.CredentialID = "JTI=" + c.ID
	}
	if k := c.Kube; k != nil {
		// A Kubernetes service-account token: the same identity TokenReview
		// would report.
		if k.ServiceAccount == nil || k.Namespace == "" || c.Subject != "system:serviceaccount:"+k.Namespace+":"+k.ServiceAccount.Name {
			return nil, authn.Fail(authn.TokenInvalid, "kubernetes.io claim does not match sub %q", c.Subject)
		}
		caller.UID = k.ServiceAccount.UID
		caller.Groups = authn.ServiceAccountGroups(k.Namespace)
		if k.Pod != nil {
			caller.PodName, caller.PodUID = k.Pod.Name, k.Pod.UID
		}
		if k.Node != nil {
			caller.NodeName, caller.NodeUID = k.Node.Name, k.Node.UID
		}
	}
	if err := a.extraClaims(iss.cfg, payload, caller); err != nil {
		return nil, err
	}
	return caller, nil
}

// extraClaims reads the configured groups, roles and tenant claims.
func (a *Authenticator) extraClaims(ic *IssuerConfig, payload []byte, caller *authn.Caller) error {
	want := []string{ic.RolesClaim, ic.TenantClaim}
	if caller.Groups == nil {
		want = append(want, ic.GroupsClaim)
	}
	needed := false
	for _, w := range want {
		needed = needed || w != ""
	}
	if !needed {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil {
		return authn.Fail(authn.TokenInvalid, "claims: %v", err)
	}
	var err error
	if caller.Groups == nil {
		if caller.Groups, err = stringList(raw, ic.GroupsClaim); err != nil {
			return err
		}
	}
	if ic.RolesClaim != "" {
		if caller.Roles, err = stringList(raw, ic.RolesClaim); err != nil {
			return err
		}
	}
	if ic.TenantClaim != "" {
		var t string
		if v, ok := raw[ic.TenantClaim]; !ok || json.Unmarshal(v, &t) != nil || t == "" {
			return authn.Fail(authn.TokenInvalid, "claim %q carries no tenant", ic.TenantClaim)
		}
		if ic.Tenant != "" && t != ic.Tenant {
			return authn.Fail(authn.TokenInvalid, "claim %q names tenant %q; issuer %s serves tenant %q", ic.TenantClaim, t, ic.Issuer, ic.Tenant)
		}
		caller.Tenant = t
	}
	return nil
}

// stringList reads a claim that is a list of strings or one space-separated
// string. An absent claim is an empty list.
func stringList(raw map[string]json.RawMessage, name string) ([]string, error) {
	v, ok := raw[name]
	if !ok || name == "" {
		return nil, nil
	}
	var l []string
	if err := json.Unmarshal(v, &l); err == nil {
		return l, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return strings.Fields(s), nil
	}
	return nil, authn.Fail(authn.TokenInvalid, "claim %q is neither a list of strings nor a string", name)
}

func algNames(algs []jose.SignatureAlgorithm) string {
	s := make([]string, len(algs))
	for i, a := range algs {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}
