package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/token"
)

const maxDocument = 1 << 20

// keySet holds one issuer's verification keys and fetches them: through
// discovery unless a JWKS URL is configured, again when a token names an
// unknown kid (at most once per RefreshMinInterval), and again when the
// keys are older than MaxKeyAge.
type keySet struct {
	ic       *IssuerConfig
	cfg      *Config
	client   *http.Client
	bearer   token.Source
	group    singleflight.Group
	mu       sync.RWMutex
	jwksURL  string
	keys     []jose.JSONWebKey
	fetched  time.Time // last successful fetch
	attempt  time.Time // last fetch attempt
	fetchErr error
}

// lookup returns the keys that may have signed a token with this kid (all
// keys when kid is empty).
func (k *keySet) lookup(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	now := k.cfg.Now()
	k.mu.RLock()
	keys, fetched, attempt := k.keys, k.fetched, k.attempt
	k.mu.RUnlock()

	found := match(keys, kid)
	switch {
	case fetched.IsZero():
		// Never fetched: fetch, unless a failed attempt was just made.
		if !attempt.IsZero() && now.Sub(attempt) < k.cfg.RefreshMinInterval/10 {
			return nil, k.lastErr()
		}
	case len(found) > 0 && now.Sub(fetched) < k.cfg.MaxKeyAge:
		return found, nil
	case len(found) > 0:
		// Stale keys: refresh, but keep using them if that fails.
		if err := k.refresh(ctx); err != nil {
			return found, nil
		}
		k.mu.RLock()
		defer k.mu.RUnlock()
		return match(k.keys, kid), nil
	case now.Sub(attempt) < k.cfg.RefreshMinInterval:
		// An unknown kid, and keys fetched moments ago: do not let random
		// kids make us hammer the issuer.
		return nil, authn.Fail(authn.TokenInvalid, "no key with kid %q in the JWKS of %s", kid, k.ic.Issuer)
	}
	if err := k.refresh(ctx); err != nil {
		return nil, err
	}
	k.mu.RLock()
	found = match(k.keys, kid)
	k.mu.RUnlock()
	if len(found) == 0 {
		return nil, authn.Fail(authn.TokenInvalid, "no key with kid %q in the JWKS of %s", kid, k.ic.Issuer)
	}
	return found, nil
}

func match(keys []jose.JSONWebKey, kid string) []jose.JSONWebKey {
	if kid == "" {
		return keys
	}
	for i := range keys {
		if keys[i].KeyID == kid {
			return keys[i : i+1 : i+1]
		}
	}
	return nil
}

func (k *keySet) lastErr() error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.fetchErr != nil {
		return k.fetchErr
	}
	return authn.Fail(authn.ValidatorUnavailable, "keys of %s not fetched yet", k.ic.Issuer)
}

// refresh fetches the keys once for all concurrent callers.
func (k *keySet) refresh(ctx context.Context) error {
	ch := k.group.DoChan("", func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.Timeout)
		defer cancel()
		keys, err := k.fetch(fctx)
		k.mu.Lock()
		defer k.mu.Unlock()
		k.attempt = k.cfg.Now()
		k.fetchErr = err
		if err == nil {
			k.keys, k.fetched = keys, k.attempt
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

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	k.mu.RLock()
	jwksURL := k.jwksURL
	k.mu.RUnlock()
	if jwksURL == "" {
		base := k.ic.DiscoveryURL
		if base == "" {
			base = k.ic.Issuer
		}
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := k.getJSON(ctx, strings.TrimSuffix(base, "/")+"/.well-known/openid-configuration", &doc); err != nil {
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
	var set jose.JSONWebKeySet
	if err := k.getJSON(ctx, jwksURL, &set); err != nil {
		return nil, err
	}
	keys := usableKeys(set)
	if len(keys) == 0 {
		return nil, authn.Fail(authn.ValidatorError, "JWKS at %s holds no usable public signing key", jwksURL)
	}
	return keys, nil
}

// usableKeys keeps a JWKS's public signing keys: a symmetric or private key
// in a JWKS is a misconfiguration and is never used.
func usableKeys(set jose.JSONWebKeySet) []jose.JSONWebKey {
	var keys []jose.JSONWebKey
	for _, key := range set.Keys {
		if key.Use != "" && key.Use != "sig" || !key.Valid() || !key.IsPublic() {
			continue
		}
		if _, symmetric := key.Key.([]byte); symmetric {
			continue
		}
		keys = append(keys, key)
	}
	return keys
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocument))
	if err != nil {
		return fetchError(ctx, url, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return authn.Fail(authn.ValidatorUnavailable, "GET %s: %s", url, resp.Status)
	default:
		return authn.Fail(authn.ValidatorError, "GET %s: %s", url, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
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
