package oidc_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/internal/kit/forge"
)

// TestSameKidRotationUnderLoad: an issuer replaces its signing key under
// the same kid (and, in the second case, signs without a kid at all),
// while eight callers send fresh tokens through a verdict cache as a
// service would. The first token the old keys cannot verify has the keys
// fetched again and is tried once more: 0 valid tokens refused, one more
// JWKS fetch however many tokens arrived at once. Before, every such token
// was refused token_invalid until the keys were MaxKeyAge old.
func TestSameKidRotationUnderLoad(t *testing.T) {
	for _, kid := range []string{"k", ""} {
		t.Run(fmt.Sprintf("kid=%q", kid), func(t *testing.T) {
			var clock atomic.Int64
			start := time.Now()
			clock.Store(start.UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			p := newIDP(t, "https://idp.example")
			old, fresh := ecKey(), ecKey()
			p.addKey("k", old)
			auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, Now: now})
			cache := authn.NewCache(auth.Layer(), authn.CacheConfig{Now: now})

			// Callers hold the read lock from minting a token to its
			// verdict; the rotation takes the write lock, so that no token
			// of the retired key is judged after the issuer retired it.
			var (
				rotation sync.RWMutex
				signer   = old
				sent     atomic.Int64
				refused  atomic.Int64
				firstErr atomic.Value
			)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						rotation.RLock()
						c := claims(p.issuer, start, map[string]any{"jti": fmt.Sprintf("w%d-%d", w, i)})
						tok := forge.Sign(c, signer, jose.ES256, kid)
						_, err := cache.Authenticate(context.Background(), tok)
						rotation.RUnlock()
						sent.Add(1)
						if err != nil {
							refused.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
						}
					}
				})
			}
			waitFor := func(n int64) {
				for target := sent.Load() + n; sent.Load() < target; {
					time.Sleep(time.Millisecond)
				}
			}
			waitFor(200)
			fetches := p.faults.Count("/jwks")
			// The issuer rotates past the refresh interval since the last
			// fetch (within it, a refetch is rate-limited as for an
			// unknown kid: TestSignatureRefetchIsRateLimited).
			rotation.Lock()
			clock.Add(int64(oidc.DefaultRefreshMinInterval + time.Second))
			p.addKey("k", fresh)
			signer = fresh
			rotation.Unlock()
			waitFor(400)
			cancel()
			wg.Wait()

			s := auth.Stats()
			t.Logf("%d tokens, %d refused; JWKS fetches %d -> %d; stats %+v", sent.Load(), refused.Load(), fetches, p.faults.Count("/jwks"), s)
			if n := refused.Load(); n != 0 {
				t.Fatalf("%d of %d valid tokens refused across a same-kid rotation; first: %v", n, sent.Load(), firstErr.Load())
			}
			if got := p.faults.Count("/jwks"); got != fetches+1 {
				t.Fatalf("JWKS fetched %d times across the rotation; want exactly once", got-fetches)
			}
			if s.SignatureRefetches == 0 {
				t.Fatalf("stats %+v: no signature refetch counted", s)
			}
		})
	}
}

// TestSignatureRefetchIsRateLimited: tokens whose signature fails under a
// known kid — forged, or signed by a key the issuer has not published —
// cost at most one JWKS fetch per refresh interval, like an unknown kid;
// refused in between token_invalid, never cached (the key may be
// published by the next fetch), counted as limited.
func TestSignatureRefetchIsRateLimited(t *testing.T) {
	clock := time.Now()
	p := newIDP(t, "https://idp.example")
	real, forger := ecKey(), ecKey()
	p.addKey("k", real)
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}, Now: func() time.Time { return clock }})
	c := claims(p.issuer, clock, nil)
	if _, err := auth.Authenticate(context.Background(), forge.Sign(c, real, jose.ES256, "k")); err != nil {
		t.Fatal(err)
	}
	forged := forge.Sign(c, forger, jose.ES256, "k")
	for range 50 {
		_, err := auth.Authenticate(context.Background(), forged)
		if authn.ReasonOf(err) != authn.TokenInvalid || authn.Cacheable(err) {
			t.Fatalf("a forged token within the interval: %v (cacheable %v); want an uncacheable token_invalid", err, authn.Cacheable(err))
		}
	}
	if n := p.faults.Count("/jwks"); n != 1 {
		t.Fatalf("%d JWKS fetches for 50 forged tokens within the interval; want 1", n)
	}
	clock = clock.Add(oidc.DefaultRefreshMinInterval)
	_, err := auth.Authenticate(context.Background(), forged)
	if authn.ReasonOf(err) != authn.TokenInvalid || !authn.Cacheable(err) {
		t.Fatalf("a forged token after a refetch: %v; want a cacheable token_invalid", err)
	}
	if n := p.faults.Count("/jwks"); n != 2 {
		t.Fatalf("%d JWKS fetches; want 2 (one refetch once the interval passed)", n)
	}
	if s := auth.Stats(); s.SignatureRefetches != 1 || s.SignatureRefetchesLimited != 50 {
		t.Fatalf("stats %+v; want 1 refetch, 50 limited", s)
	}
}
