package oidc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/token"
)

// Authenticator verifies tokens offline against its issuers' keys. Create
// one with [New]; it is safe for concurrent use.
//
//	verify, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{{
//		Issuer:    "https://idp.tenant-a.example", // discovery and keys fetched from it
//		Audiences: []string{"my-service"},
//		Tenant:    "tenant-a", // every caller of this issuer
//	}}})
//	auth := authn.NewCache(verify, authn.CacheConfig{})
//
// An AuthenticationConfiguration gives the issuers instead:
// authconfig.Load (package authn/authconfig).
type Authenticator struct {
	cfg     Config
	issuers map[string]*issuer
	stats   counters
	metrics atomic.Pointer[issuerMetrics] // set by Collectors
}

// Layer is the verifier as a layer (authn.Layer): it states whatever its
// issuers' claims give, and cannot tell of a revocation.
func (a *Authenticator) Layer() authn.Layer { return authn.Layer{Authenticator: a} }

// Stats returns what the key sets did so far.
func (a *Authenticator) Stats() Stats {
	return Stats{Fetches: a.stats.fetches.Load(), FetchFailures: a.stats.fetchFailures.Load(), KeysIgnored: a.stats.keysIgnored.Load(),
		StaleRefusals: a.stats.staleRefusals.Load(), UnknownKid: a.stats.unknownKid.Load(),
		SignatureRefetches: a.stats.signatureRefetches.Load(), SignatureRefetchesLimited: a.stats.signatureRefetchesLimited.Load()}
}

type issuer struct {
	cfg    *IssuerConfig
	algs   []string
	keys   *keySet
	hash   string                 // issuerHash, the metric label
	series atomic.Pointer[series] // set by useMetrics
}

// useMetrics starts observing the per-issuer series in m.
func (a *Authenticator) useMetrics(m *issuerMetrics) {
	for _, iss := range a.issuers {
		iss.series.Store(m.seriesOf(iss.hash))
	}
	a.metrics.Store(m)
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
		client := ic.HTTPClient
		if client == nil {
			var err error
			if client, err = httpClient(ic); err != nil {
				return nil, fmt.Errorf("oidc: issuer %q: %w", ic.Issuer, err)
			}
		}
		ks := &keySet{ic: ic, cfg: &a.cfg, client: client, jwksURL: ic.JWKSURL, stats: &a.stats, metrics: &a.metrics, hash: issuerHash(ic.Issuer)}
		if ic.BearerTokenFile != "" {
			ks.bearer = token.File(ic.BearerTokenFile)
		}
		iss := &issuer{cfg: ic, keys: ks, hash: ks.hash}
		iss.algs = ic.Algorithms
		a.issuers[ic.Issuer] = iss
	}
	return a, nil
}

// Prefetch fetches every issuer's keys now, all at once, and returns
// every failure.
func (a *Authenticator) Prefetch(ctx context.Context) error {
	errs := make([]error, 0, len(a.issuers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, iss := range a.issuers {
		wg.Go(func() {
			if err := iss.keys.refresh(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("oidc: issuer %q: %w", iss.cfg.Issuer, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// claims is the payload callerauth reads: the registered claims, and the
// raw value of every other member, for the kubernetes.io claim and the
// configured groups, roles and tenant claims.
type claims struct {
	token.Claims
	other []member
	// inline holds the first members of other: a token's claims are read
	// with no allocation of their own.
	inline [12]member
	// text reads the claims' strings: substrings of one copy of the
	// payload when it is small (maxTextPayload), else a copy each.
	text ijson.Text
}

// maxTextPayload bounds the payload whose one copy the caller's strings
// share: a cached caller keeps that copy alive, so a large payload (a
// token with many claims) is not kept whole for a few short strings.
const maxTextPayload = 4 << 10

type member struct {
	name, value []byte // slices of the decoded payload
}

// get returns the raw value of a member other than the registered claims.
func (c *claims) get(name string) ([]byte, bool) {
	for _, m := range c.other {
		if string(m.name) == name {
			return m.value, true
		}
	}
	return nil, false
}

// errAlphabet is a token with a byte no compact JWS holds.
func errAlphabet() error {
	return authn.Fail(authn.TokenInvalid, "not a compact JWS: a byte outside base64url (white space, padding, …)")
}

// Authenticate verifies the token.
func (a *Authenticator) Authenticate(ctx context.Context, tok string) (*authn.Caller, error) {
	if tok == "" || len(tok) > token.MaxLength {
		return nil, authn.Fail(authn.TokenInvalid, "token is empty or longer than %d bytes", token.MaxLength)
	}
	// Any other byte outside base64url fails its segment's decode below,
	// and is then reported as what it is.
	if !noSkippedBytes(tok) {
		return nil, errAlphabet()
	}
	// Checks that need no claims come first; the payload is decoded once,
	// and before the signature has verified only its "iss" is read — the
	// first member of that name, no further than it — to pick the
	// issuer's keys. A forged token thus costs one base64 decode, that
	// short scan and one signature check, however many claims it carries;
	// the claims are read (strictly: I-JSON, every name once) only from the
	// very bytes whose signature verified.
	raw, err := token.DecodePayload(tok)
	if err != nil {
		if !compactAlphabet(tok) {
			return nil, errAlphabet()
		}
		return nil, authn.Fail(authn.TokenInvalid, "%v", err)
	}
	issRaw, found, err := ijson.Lookup(raw, "iss")
	if err != nil {
		return nil, authn.Fail(authn.TokenInvalid, "token: claims: %v", err)
	}
	var iss *issuer
	if name, ok := ijson.Plain(issRaw); ok {
		iss = a.issuers[string(name)] // no string made for the lookup
	}
	if iss == nil {
		issName, isString := ijson.String(issRaw)
		if !found || !isString {
			return nil, authn.Fail(authn.TokenInvalid, "token: iss is missing or not a string")
		}
		if iss = a.issuers[issName]; iss == nil {
			return nil, authn.Fail(authn.TokenInvalid, "unknown issuer %q", issName)
		}
	}
	s := iss.series.Load()
	if s == nil {
		return a.verify(ctx, iss, tok, raw)
	}
	start := time.Now()
	c, err := a.verify(ctx, iss, tok, raw)
	if err != nil {
		s.failure.Observe(time.Since(start).Seconds())
	} else {
		s.success.Observe(time.Since(start).Seconds())
	}
	return c, err
}

// verify checks the token of a known issuer: its signature, then its
// claims.
func (a *Authenticator) verify(ctx context.Context, iss *issuer, tok string, raw []byte) (*authn.Caller, error) {
	jws, err := parseCompact(tok, iss.algs)
	if err != nil {
		if !compactAlphabet(tok) {
			return nil, errAlphabet()
		}
		return nil, authn.Fail(authn.TokenInvalid, "malformed JWT or algorithm not allowed for %s (%s): %v", iss.cfg.Issuer, strings.Join(iss.algs, ", "), err)
	}
	keys, fetched, err := iss.keys.lookup(ctx, jws.kid)
	if err != nil {
		return nil, err
	}
	if !verifyAny(&jws, keys) {
		// The issuer may have rotated the key under the same kid (or signs
		// without one): the keys are fetched again, rate-limited as for
		// an unknown kid, and tried once more.
		again, ok := iss.keys.again(ctx, jws.kid, fetched)
		if !ok {
			// Not cached as a verdict: a fetch allowed a moment later may
			// publish the key.
			return nil, &authn.Error{Reason: authn.TokenInvalid, Uncacheable: true,
				Err: fmt.Errorf("signature does not verify with the issuer's keys (alg %s, kid %q); they were fetched less than %s ago", jws.alg, jws.kid, a.cfg.RefreshMinInterval)}
		}
		if !verifyAny(&jws, again) {
			return nil, authn.Fail(authn.TokenInvalid, "signature does not verify with the issuer's keys, fetched again just now (alg %s, kid %q)", jws.alg, jws.kid)
		}
	}
	// The claims are read from the payload segment of the very signing
	// input that verified; a second "iss" is refused there.
	c := &claims{}
	c.other = c.inline[:0]
	decode := token.DecodeClaims
	if len(raw) <= maxTextPayload {
		// raw was decoded for this verification alone and is only read
		// from now on: the caller's strings are substrings of it.
		c.text, decode = ijson.OwnText(raw), token.DecodeClaimsOwned
	}
	if err := decode(raw, &c.Claims, func(name, v []byte) error {
		c.other = append(c.other, member{name, v})
		return nil
	}); err != nil {
		return nil, authn.Fail(authn.TokenInvalid, "%v", err)
	}
	return a.caller(ctx, iss, c, raw)
}

func verifyAny(jws *compactJWS, keys []jose.JSONWebKey) bool {
	for i := range keys {
		if jws.verifyWith(&keys[i]) {
			return true
		}
	}
	return false
}

func (a *Authenticator) caller(ctx context.Context, iss *issuer, c *claims, payload []byte) (*authn.Caller, error) {
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
	if a.cfg.Audience != "" && !slices.Contains(matched, a.cfg.Audience) {
		return nil, authn.Fail(authn.TokenInvalid, "token audiences %q do not include this service's %q (its issuer accepts %q)", []string(c.Audience), a.cfg.Audience, iss.cfg.Audiences)
	}
	if m := iss.cfg.Mapping; m != nil {
		// An AuthenticationConfiguration's issuer: its mappings alone say
		// who the caller is, as on the API server.
		if err := idTokenShape(c); err != nil {
			return nil, err
		}
		caller := &authn.Caller{Audiences: matched, Issuer: c.Issuer, IssuedAt: c.Issued(), Expiry: c.ExpiresAt()}
		if c.ID != "" {
			caller.CredentialID = "JTI=" + c.ID
		}
		if err := m.Identity(ctx, payload, caller); err != nil {
			if e := (*authn.Error)(nil); !errors.As(err, &e) {
				err = authn.Fail(authn.TokenInvalid, "%v", err)
			}
			return nil, err
		}
		return caller, nil
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
	if v, ok := c.get("kubernetes.io"); ok {
		// A Kubernetes service-account token: the same identity TokenReview
		// would report.
		if err := kubernetesClaim(c.text, v, c.Subject, caller); err != nil {
			return nil, err
		}
	}
	if err := a.extraClaims(iss.cfg, c, caller); err != nil {
		return nil, err
	}
	return caller, nil
}

// kubernetesClaim reads the kubernetes.io claim of a service-account
// token (names matched exactly, like every claim) into the caller, and
// requires it to name the service account sub names.
func kubernetesClaim(text ijson.Text, v []byte, sub string, caller *authn.Caller) error {
	var namespace, saName string
	hasSA := false
	// The payload was read strictly (token.DecodeClaimsOwned): its nested values
	// are walked without checking them again.
	err := ijson.Walk(v, func(name, v []byte) error {
		switch string(name) {
		case "namespace":
			var ok bool
			if namespace, ok = text.String(v); !ok {
				return errors.New("namespace is not a string")
			}
		case "serviceaccount":
			hasSA = true
			return readRef(text, "serviceaccount", v, &saName, &caller.UID)
		case "pod":
			return readRef(text, "pod", v, &caller.PodName, &caller.PodUID)
		case "node":
			return readRef(text, "node", v, &caller.NodeName, &caller.NodeUID)
		}
		return nil
	})
	if err != nil {
		return authn.Fail(authn.TokenInvalid, "kubernetes.io claim: %v", err)
	}
	if !hasSA || namespace == "" || !serviceAccountIs(sub, namespace, saName) {
		return authn.Fail(authn.TokenInvalid, "kubernetes.io claim does not match sub %q", sub)
	}
	caller.Groups = authn.ServiceAccountGroups(namespace)
	return nil
}

// serviceAccountIs reports whether sub is the username of the service
// account name in namespace, system:serviceaccount:<namespace>:<name>.
func serviceAccountIs(sub, namespace, name string) bool {
	rest, ok := strings.CutPrefix(sub, "system:serviceaccount:")
	return ok && len(rest) == len(namespace)+1+len(name) &&
		rest[:len(namespace)] == namespace && rest[len(namespace)] == ':' && rest[len(namespace)+1:] == name
}

// readRef reads a {name, uid} object of the kubernetes.io claim.
func readRef(text ijson.Text, what string, v []byte, name, uid *string) error {
	return ijson.Walk(v, func(member, v []byte) error {
		var ok bool
		switch string(member) {
		case "name":
			*name, ok = text.String(v)
		case "uid":
			*uid, ok = text.String(v)
		default:
			return nil
		}
		if !ok {
			return fmt.Errorf("%s.%s is not a string", what, member)
		}
		return nil
	})
}

// extraClaims reads the configured groups, roles and tenant claims.
func (a *Authenticator) extraClaims(ic *IssuerConfig, c *claims, caller *authn.Caller) error {
	var err error
	if caller.Groups == nil {
		if caller.Groups, err = stringList(c, ic.GroupsClaim); err != nil {
			return err
		}
	}
	if ic.RolesClaim != "" {
		if caller.Roles, err = stringList(c, ic.RolesClaim); err != nil {
			return err
		}
	}
	if ic.TenantClaim != "" {
		v, present := c.get(ic.TenantClaim)
		t, ok := c.text.String(v)
		switch {
		case !present || (ok && t == ""):
			// The token states no tenant: the caller has none, and a
			// service that scopes by tenant refuses it tenant_missing.
			caller.Tenant = ""
			return nil
		case !ok:
			return authn.Fail(authn.TokenInvalid, "claim %q is not a string", ic.TenantClaim)
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
func stringList(c *claims, name string) ([]string, error) {
	if name == "" {
		return nil, nil
	}
	v, ok := c.get(name)
	if !ok {
		return nil, nil
	}
	if l, ok := c.text.Strings(v); ok {
		return l, nil
	}
	if s, ok := c.text.String(v); ok {
		return strings.Fields(s), nil
	}
	return nil, authn.Fail(authn.TokenInvalid, "claim %q is neither a list of strings nor a string", name)
}
