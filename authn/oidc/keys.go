package oidc

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/token"
)

const maxDocument = 1 << 20

// Stats count what the key sets of an [Authenticator] did.
type Stats struct {
	// Fetches and FetchFailures count JWKS fetches (discovery included).
	Fetches, FetchFailures uint64
	// KeysIgnored counts the JWKS entries ignored as unusable (RFC 7517
	// §5: unknown kty or curve, missing members, a bad x5c, an RSA key under
	// 2048 bits, a private or symmetric key, use other than sig), each
	// counted and logged once.
	KeysIgnored uint64
	// StaleRefusals counts verifications answered validator_unavailable
	// because every fetch failed for longer than MaxStaleKeys.
	StaleRefusals uint64
	// UnknownKid counts tokens naming a kid that was not among the keys
	// while a refetch could not yet run: signing_key_unknown (never
	// cached) when the keys held are the last fetch's,
	// validator_unavailable when that fetch failed.
	UnknownKid uint64
	// SignatureRefetches counts tokens whose signature failed under the
	// keys of their kid (or under every key, without a kid) and that had
	// the keys fetched again — an issuer that rotated a key under the
	// same kid; SignatureRefetchesLimited those refused because a fetch
	// had run less than RefreshMinInterval before.
	SignatureRefetches, SignatureRefetchesLimited uint64
}

type counters struct {
	fetches, fetchFailures, keysIgnored, staleRefusals, unknownKid atomic.Uint64
	signatureRefetches, signatureRefetchesLimited                  atomic.Uint64
}

// keySet holds one issuer's verification keys and fetches them: through
// discovery unless a JWKS URL is configured, when first needed, again
// when they are MaxKeyAge old (a key the issuer removed is gone then), and
// again at once when a token names an unknown kid — at most once per
// RefreshMinInterval. While fetches fail, the last keys are used for at
// most MaxStaleKeys.
type keySet struct {
	ic       *IssuerConfig
	cfg      *Config
	client   *http.Client
	bearer   token.Source
	stats    *counters
	metrics  *atomic.Pointer[issuerMetrics] // the authenticator's
	hash     string                         // issuerHash
	group    singleflight.Group
	mu       sync.RWMutex
	jwksURL  string
	keys     []jose.JSONWebKey
	fetched  time.Time // last successful fetch
	attempt  time.Time // last fetch attempt
	fetchErr error
	ignored  map[[sha256.Size]byte]bool // unusable entries already logged
}

func (k *keySet) snapshot() (keys []jose.JSONWebKey, fetched, attempt time.Time) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.keys, k.fetched, k.attempt
}

// lookup returns the keys that may have signed a token with this kid (all
// keys when kid is empty; every key of that kid, RFC 7517 §4.5 allowing
// several of different types), and when they were fetched.

// again returns the keys of kid to try once more for a token whose
// signature none of the keys fetched at used verified: the issuer may
// have rotated a key under the same kid, or signs without one. Keys
// fetched since used are tried as they are; else they are fetched again,
// at most once per RefreshMinInterval as for an unknown kid. ok is false
// when there is nothing new to try.
func (k *keySet) again(ctx context.Context, kid string, used time.Time) (keys []jose.JSONWebKey, ok bool) {
	keys, fetched, attempt := k.snapshot()
	if fetched.After(used) {
		return match(keys, kid), true
	}
	if k.cfg.Now().Sub(attempt) < k.cfg.RefreshMinInterval {
		k.stats.signatureRefetchesLimited.Add(1)
		return nil, false
	}
	k.stats.signatureRefetches.Add(1)
	if err := k.refresh(ctx); err != nil {
		return nil, false
	}
	keys, fetched, _ = k.snapshot()
	return match(keys, kid), fetched.After(used)
}

func (k *keySet) lookup(ctx context.Context, kid string) ([]jose.JSONWebKey, time.Time, error) {
	now := k.cfg.Now()
	_, fetched, attempt := k.snapshot()
	// A failing issuer is asked again at most ten times per
	// RefreshMinInterval, however many tokens arrive.
	mayFetch := attempt.IsZero() || now.Sub(attempt) >= k.cfg.RefreshMinInterval/10
	switch {
	case fetched.IsZero():
		if !mayFetch {
			return nil, time.Time{}, k.lastErr()
		}
		if err := k.refresh(ctx); err != nil {
			return nil, time.Time{}, err
		}
	case now.Sub(fetched) >= k.cfg.MaxKeyAge && mayFetch:
		_ = k.refresh(ctx) // on failure the last keys stand, within MaxStaleKeys
	}
	keys, fetched, attempt := k.snapshot()
	if age := now.Sub(fetched); age >= k.cfg.MaxStaleKeys {
		k.stats.staleRefusals.Add(1)
		return nil, time.Time{}, authn.Fail(authn.ValidatorUnavailable, "the keys of %s were last fetched %s ago, longer than they are trusted while fetches fail (%s): %v",
			k.ic.Issuer, age.Round(time.Second), k.cfg.MaxStaleKeys, k.lastErr())
	}
	if found := match(keys, kid); len(found) > 0 {
		return found, fetched, nil
	}
	if now.Sub(attempt) < k.cfg.RefreshMinInterval {
		k.stats.unknownKid.Add(1)
		if fetched.Before(attempt) {
			// The last fetch failed: the keys held cannot vouch that the
			// issuer does not publish this kid.
			return nil, time.Time{}, authn.Fail(authn.ValidatorUnavailable, "no key with kid %q among the keys of %s fetched %s ago, and the last fetch failed: %v",
				kid, k.ic.Issuer, now.Sub(fetched).Round(time.Millisecond), k.lastErr())
		}
		// The keys were fetched, and hold no such kid: the answer says
		// so (signing_key_unknown) — not the validator's failure, which
		// --caller-fail-open-on-unavailable would let through, and not
		// yet a verdict against the token, whose issuer may have
		// published the key a moment after the fetch. Never cached; the
		// keys are fetched again once the interval is over.
		return nil, time.Time{}, &authn.Error{Reason: authn.SigningKeyUnknown, Uncacheable: true,
			Err: fmt.Errorf("no key with kid %q among the keys of %s fetched %s ago; they are fetched again at most every %s, in %s",
				kid, k.ic.Issuer, now.Sub(attempt).Round(time.Millisecond), k.cfg.RefreshMinInterval, (k.cfg.RefreshMinInterval - now.Sub(attempt)).Round(time.Millisecond))}
	}
	if err := k.refresh(ctx); err != nil {
		return nil, time.Time{}, err
	}
	keys, fetched, _ = k.snapshot()
	if found := match(keys, kid); len(found) > 0 {
		return found, fetched, nil
	}
	// Not published by a fetch made just now: refused, but never cached as
	// a verdict (it may be published a moment later).
	return nil, time.Time{}, &authn.Error{Reason: authn.TokenInvalid, Uncacheable: true, Err: fmt.Errorf("no key with kid %q in the JWKS of %s", kid, k.ic.Issuer)}
}

// match returns the keys whose kid is kid (every key when kid is ""). One
// match — the usual case — is a subslice of keys: nothing is allocated per
// token. (A fetch replaces the key set's slice, never writes into it.)
func match(keys []jose.JSONWebKey, kid string) []jose.JSONWebKey {
	if kid == "" {
		return keys
	}
	first, n := -1, 0
	for i := range keys {
		if keys[i].KeyID == kid {
			if n == 0 {
				first = i
			}
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case 1:
		return keys[first : first+1 : first+1]
	}
	found := make([]jose.JSONWebKey, 0, n)
	for i := range keys {
		if keys[i].KeyID == kid {
			found = append(found, keys[i])
		}
	}
	return found
}

func (k *keySet) lastErr() error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.fetchErr != nil {
		return k.fetchErr
	}
	return authn.Fail(authn.ValidatorUnavailable, "keys of %s not fetched yet", k.ic.Issuer)
}

// refresh fetches the keys once for all concurrent callers. A successful
// fetch replaces the keys: a key missing from it is dropped at once.
func (k *keySet) refresh(ctx context.Context) error {
	ch := k.group.DoChan("", func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.Timeout)
		defer cancel()
		k.stats.fetches.Add(1)
		keys, err := k.fetch(fctx)
		k.mu.Lock()
		defer k.mu.Unlock()
		k.attempt = k.cfg.Now()
		k.fetchErr = err
		if m := k.metrics.Load(); m != nil {
			m.fetched(k.hash, err == nil, k.attempt)
		}
		if err == nil {
			k.keys, k.fetched = keys, k.attempt
		} else {
			k.stats.fetchFailures.Add(1)
		}
		return nil, err
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return &authn.Error{Reason: authn.ValidatorTimeout, Err: ctx.Err()}
	}
}

// tracerName names the backend's spans.
const tracerName = "github.com/callerauth/callerauth/authn/oidc"

// fetch reads the issuer's keys (its discovery document first, once), in
// a span of its own when the request that needs them is traced
// (callerauth.key_fetch: the keys found, or the failure).
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	ctx, span := spans.Start(ctx, tracerName, "callerauth.key_fetch", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	keys, err := k.fetchKeys(ctx)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("callerauth.keys", len(keys)))
		if err != nil {
			spans.Fail(span, "the issuer's keys could not be fetched")
		}
	}
	return keys, err
}

func (k *keySet) fetchKeys(ctx context.Context) ([]jose.JSONWebKey, error) {
	k.mu.RLock()
	jwksURL := k.jwksURL
	k.mu.RUnlock()
	if jwksURL == "" {
		base := k.ic.DiscoveryURL
		if base == "" {
			base = k.ic.Issuer
		}
		discovery := strings.TrimSuffix(base, "/") + "/.well-known/openid-configuration"
		if k.ic.DiscoveryDocumentURL != "" {
			base, discovery = k.ic.DiscoveryDocumentURL, k.ic.DiscoveryDocumentURL
		}
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := k.getJSON(ctx, discovery, &doc); err != nil {
			return nil, err
		}
		if doc.Issuer != k.ic.Issuer {
			return nil, authn.Fail(authn.ValidatorError, "discovery at %s names issuer %q, not %q", base, doc.Issuer, k.ic.Issuer)
		}
		if err := httpsURL(doc.JWKSURI); err != nil {
			return nil, authn.Fail(authn.ValidatorError, "discovery at %s: jwks_uri: %v", base, err)
		}
		jwksURL = doc.JWKSURI
		k.mu.Lock()
		k.jwksURL = jwksURL
		k.mu.Unlock()
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := k.getJSON(ctx, jwksURL, &set); err != nil {
		return nil, err
	}
	keys, ignored := readKeys(set.Keys)
	for _, ig := range ignored {
		k.ignore(jwksURL, ig.index, set.Keys[ig.index], ig.why)
	}
	if len(keys) == 0 {
		return nil, authn.Fail(authn.ValidatorError, "JWKS at %s holds no usable public signing key (%d entries)", jwksURL, len(set.Keys))
	}
	return keys, nil
}

// ignoredKey is a JWKS entry left out, and why.
type ignoredKey struct {
	index int
	why   string
}

// readKeys reads a JWKS's entries one by one and keeps the public signing
// keys it can use; an entry it cannot use (RFC 7517 §5) is left out, not a
// reason to refuse the set.
func readKeys(entries []json.RawMessage) (keys []jose.JSONWebKey, ignored []ignoredKey) {
	for i, raw := range entries {
		var key jose.JSONWebKey
		why := ""
		if err := key.UnmarshalJSON(raw); err != nil {
			why = err.Error()
		} else {
			why = unusable(&key)
		}
		if why != "" {
			ignored = append(ignored, ignoredKey{i, why})
			continue
		}
		keys = append(keys, key)
	}
	return keys, ignored
}

// unusable says why a parsed JWK cannot verify tokens here, or "".
func unusable(key *jose.JSONWebKey) string {
	switch {
	case key.Use != "" && key.Use != "sig":
		return fmt.Sprintf("use %q is not sig", key.Use)
	case !key.Valid():
		return "not a valid key"
	case !key.IsPublic():
		return "a private key: a JWKS publishes public keys only"
	}
	switch pub := key.Key.(type) {
	case *rsa.PublicKey:
		if pub.N.BitLen() < MinRSABits {
			return fmt.Sprintf("an RSA key of %d bits; RFC 7518 §3.3 requires %d or more", pub.N.BitLen(), MinRSABits)
		}
	case *ecdsa.PublicKey, ed25519.PublicKey:
	default:
		return fmt.Sprintf("a %T key cannot verify signatures here", key.Key)
	}
	return ""
}

// ignore counts and logs an unusable JWKS entry, once per entry.
func (k *keySet) ignore(url string, i int, raw []byte, why string) {
	sum := sha256.Sum256(raw)
	k.mu.Lock()
	if k.ignored == nil {
		k.ignored = map[[sha256.Size]byte]bool{}
	}
	seen := k.ignored[sum]
	if !seen && len(k.ignored) < 1024 {
		k.ignored[sum] = true
	}
	k.mu.Unlock()
	if seen {
		return
	}
	k.stats.keysIgnored.Add(1)
	k.cfg.Logger.Warn("oidc: ignoring a JWKS entry that cannot verify tokens (RFC 7517 §5)", "issuer", k.ic.Issuer, "jwks", url, "index", i, "reason", why)
}

func (k *keySet) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return authn.Fail(authn.ValidatorError, "%s: %v", url, err)
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	if k.bearer != nil {
		tok, err := k.bearer.Token(ctx)
		if err != nil {
			return authn.Fail(authn.ValidatorError, "credentials for %s: %v", url, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return fetchError(ctx, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocument+1))
	if err != nil {
		return fetchError(ctx, url, err)
	}
	if len(body) > maxDocument {
		return authn.Fail(authn.ValidatorError, "GET %s: the document is larger than %d bytes", url, maxDocument)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return authn.Fail(authn.ValidatorUnavailable, "GET %s: %s", url, resp.Status)
	default:
		return authn.Fail(authn.ValidatorError, "GET %s: %s", url, resp.Status)
	}
	// A key set or discovery document is another's format, read strictly:
	// I-JSON, its unknown members ignored (RFC 7517 §5).
	if err := ijson.Read(body, v); err != nil {
		return authn.Fail(authn.ValidatorError, "GET %s: %v", url, err)
	}
	return nil
}

func fetchError(ctx context.Context, url string, err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
		return &authn.Error{Reason: authn.ValidatorTimeout, Err: fmt.Errorf("GET %s: %w", url, err)}
	}
	return &authn.Error{Reason: authn.ValidatorUnavailable, Err: fmt.Errorf("GET %s: %w", url, err)}
}
