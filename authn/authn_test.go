package authn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/internal/kit/testjwt"
	"github.com/callerauth/callerauth/reason"
	"github.com/callerauth/callerauth/token"

	apiauth "k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
)

func TestReasonOf(t *testing.T) {
	tests := []struct {
		err  error
		want reason.Reason
	}{
		{nil, reason.Reason{}},
		{authn.Fail(authn.TokenInvalid, "bad"), authn.TokenInvalid},
		{fmt.Errorf("wrapped: %w", authn.Fail(authn.ValidatorUnavailable, "down")), authn.ValidatorUnavailable},
		{context.DeadlineExceeded, authn.ValidatorTimeout},
		{errors.New("something"), authn.ValidatorError},
	}
	for _, tt := range tests {
		if got := authn.ReasonOf(tt.err); got != tt.want {
			t.Errorf("ReasonOf(%v) = %q; want %q", tt.err, got, tt.want)
		}
	}
	err := authn.Fail(authn.ValidatorTimeout, "slow")
	if !errors.Is(err, authn.ErrValidatorTimeout) || errors.Is(err, authn.ErrTokenInvalid) {
		t.Error("errors.Is against the class sentinels")
	}
	if err.Error() != "authn: validator_timeout: slow" {
		t.Errorf("Error() = %q", err.Error())
	}
	for r, want := range map[reason.Reason]bool{authn.ValidatorUnavailable: true, authn.ValidatorTimeout: true, authn.TokenInvalid: false, authn.ValidatorError: false} {
		if authn.SaysNothingAboutCaller(r) != want {
			t.Errorf("SaysNothingAboutCaller(%s) = %v", r, !want)
		}
	}
}

func TestCheckLifetime(t *testing.T) {
	exp := time.Unix(1800000000, 0)
	nbf := exp.Add(-time.Hour)
	c := &token.Claims{Expiry: &token.NumericDate{Time: exp}, NotBefore: &token.NumericDate{Time: nbf}, IssuedAt: &token.NumericDate{Time: nbf}}
	tests := []struct {
		name   string
		now    time.Time
		leeway time.Duration
		ok     bool
	}{
		{"1ns before exp", exp.Add(-time.Nanosecond), 0, true},
		{"at exp", exp, 0, false},
		{"1s past exp", exp.Add(time.Second), 0, false},
		{"leeway does not extend exp", exp.Add(time.Second), time.Minute, false},
		{"at nbf", nbf, 0, true},
		{"1ns before nbf", nbf.Add(-time.Nanosecond), 0, false},
		{"before nbf within leeway", nbf.Add(-time.Second), 2 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := authn.CheckLifetime(c, tt.now, tt.leeway)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v; want ok=%v", err, tt.ok)
			}
			if err != nil && authn.ReasonOf(err) != authn.TokenInvalid {
				t.Fatalf("class %s", authn.ReasonOf(err))
			}
		})
	}
	if err := authn.CheckLifetime(&token.Claims{}, exp, 0); err == nil {
		t.Error("a token without exp passed")
	}
}

// counting is an authenticator that accepts tokens starting with "good",
// fails others with the class after the prefix, and counts its calls.
type counting struct {
	calls   atomic.Int64
	release chan struct{}
	expiry  time.Time
}

func (c *counting) Authenticate(_ context.Context, tok string) (*authn.Caller, error) {
	c.calls.Add(1)
	if c.release != nil {
		<-c.release
	}
	if len(tok) >= 4 && tok[:4] == "good" {
		return &authn.Caller{Username: "user-" + tok, Expiry: c.expiry}, nil
	}
	for _, r := range authn.Reasons() {
		if r.String() == tok {
			return nil, authn.Fail(r, "refused")
		}
	}
	return nil, authn.Fail(authn.TokenInvalid, "refused")
}

// layer is counting as a layer whose verdicts depend on audience aud.
func (c *counting) layer() authn.Layer {
	return authn.Layer{Authenticator: c, Audiences: []string{"aud"}}
}

func TestCacheTTLAndExpiry(t *testing.T) {
	now := time.Unix(1700000000, 0)
	inner := &counting{expiry: now.Add(time.Hour)}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{TTL: time.Minute, Now: func() time.Time { return now }})
	ctx := context.Background()
	for range 3 {
		if _, err := c.Authenticate(ctx, "good1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := inner.calls.Load(); n != 1 {
		t.Fatalf("inner called %d times; want 1", n)
	}
	now = now.Add(time.Minute - time.Nanosecond)
	_, _ = c.Authenticate(ctx, "good1")
	if n := inner.calls.Load(); n != 1 {
		t.Fatalf("inner called %d times before the TTL; want 1", n)
	}
	now = now.Add(time.Nanosecond)
	_, _ = c.Authenticate(ctx, "good1")
	if n := inner.calls.Load(); n != 2 {
		t.Fatalf("inner called %d times at the TTL; want 2", n)
	}

	// Never past the token's exp.
	inner.expiry = now.Add(10 * time.Second)
	_, _ = c.Authenticate(ctx, "good2")
	now = now.Add(10 * time.Second)
	_, _ = c.Authenticate(ctx, "good2")
	if n := inner.calls.Load(); n != 4 {
		t.Fatalf("inner called %d times; want 4 (exp caps the TTL)", n)
	}
	if st := c.Stats(); st.Hits != 3 || st.Misses != 4 {
		t.Fatalf("stats %+v", st)
	}
	if got := c.Layer().Audiences; len(got) != 1 || got[0] != "aud" {
		t.Fatalf("the cache's layer states audiences %v; want its inner layer's", got)
	}
}

// TestCacheFailures: validator failures are never cached — they say
// nothing about the token; a token_invalid verdict is reused for
// NegativeTTL, so that a repeated bad token costs one verification per
// NegativeTTL, then asked again.
func TestCacheFailures(t *testing.T) {
	now := time.Unix(1700000000, 0)
	inner := &counting{}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{Now: func() time.Time { return now }})
	for _, r := range []reason.Reason{authn.ValidatorUnavailable, authn.ValidatorTimeout, authn.ValidatorError} {
		for range 2 {
			if _, err := c.Authenticate(context.Background(), r.String()); authn.ReasonOf(err) != r {
				t.Fatalf("class %s; want %s", authn.ReasonOf(err), r)
			}
		}
	}
	if n := inner.calls.Load(); n != 6 || c.Len() != 0 {
		t.Fatalf("validator failures: inner called %d times, %d cached; want 6 and 0", n, c.Len())
	}
	for range 5 {
		if _, err := c.Authenticate(context.Background(), authn.TokenInvalid.String()); authn.ReasonOf(err) != authn.TokenInvalid {
			t.Fatalf("class %v", err)
		}
	}
	if n := inner.calls.Load(); n != 7 || c.Stats().NegativeHits != 4 {
		t.Fatalf("a repeated bad token: inner called %d times (want 7), %d negative hits", n, c.Stats().NegativeHits)
	}
	now = now.Add(authn.DefaultCacheNegativeTTL)
	if _, err := c.Authenticate(context.Background(), authn.TokenInvalid.String()); authn.ReasonOf(err) != authn.TokenInvalid || inner.calls.Load() != 8 {
		t.Fatalf("after NegativeTTL: %v, %d calls", err, inner.calls.Load())
	}
	off := authn.NewCache(inner.layer(), authn.CacheConfig{NegativeTTL: -1})
	for range 2 {
		_, _ = off.Authenticate(context.Background(), authn.TokenInvalid.String())
	}
	if inner.calls.Load() != 10 {
		t.Fatalf("NegativeTTL -1 cached a refusal: %d calls", inner.calls.Load())
	}
}

// TestCacheMaxInFlight: beyond MaxInFlight running verifications a lookup
// fails at once as validator_unavailable; cached verdicts are unaffected.
func TestCacheMaxInFlight(t *testing.T) {
	inner := &counting{}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{MaxInFlight: 2})
	if _, err := c.Authenticate(context.Background(), "good-cached"); err != nil {
		t.Fatal(err)
	}
	inner.release = make(chan struct{})
	done := make(chan error, 2)
	for _, tok := range []string{"good-1", "good-2"} {
		go func() { _, err := c.Authenticate(context.Background(), tok); done <- err }()
	}
	for inner.calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	_, err := c.Authenticate(context.Background(), "good-3")
	if authn.ReasonOf(err) != authn.ValidatorUnavailable || !strings.Contains(err.Error(), "in flight") || c.Stats().Shed != 1 {
		t.Fatalf("the third concurrent verification: %v; want validator_unavailable, shed", err)
	}
	if caller, err := c.Authenticate(context.Background(), "good-cached"); err != nil || caller == nil {
		t.Fatalf("a cached verdict during the flood: %v", err)
	}
	close(inner.release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestCacheLRU(t *testing.T) {
	inner := &counting{}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{MaxEntries: 2})
	ctx := context.Background()
	_, _ = c.Authenticate(ctx, "goodA")
	_, _ = c.Authenticate(ctx, "goodB")
	_, _ = c.Authenticate(ctx, "goodA") // A is now most recent
	_, _ = c.Authenticate(ctx, "goodC") // evicts B
	if c.Len() != 2 {
		t.Fatalf("len %d", c.Len())
	}
	before := inner.calls.Load()
	_, _ = c.Authenticate(ctx, "goodA")
	_, _ = c.Authenticate(ctx, "goodC")
	if inner.calls.Load() != before {
		t.Fatal("A or C was evicted")
	}
	_, _ = c.Authenticate(ctx, "goodB")
	if inner.calls.Load() != before+1 {
		t.Fatal("B was not evicted")
	}
	if c.Stats().Evictions != 2 {
		t.Fatalf("evictions %d", c.Stats().Evictions)
	}
}

// TestCacheSingleflight: N concurrent first-time requests with one new token
// cause exactly one lookup, counted, not timed.
func TestCacheSingleflight(t *testing.T) {
	inner := &counting{release: make(chan struct{})}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{})
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	started := make(chan struct{}, n)
	for range n {
		wg.Go(func() {
			started <- struct{}{}
			caller, err := c.Authenticate(context.Background(), "good-new")
			if err == nil && caller.Username != "user-good-new" {
				err = fmt.Errorf("caller %q", caller.Username)
			}
			errs <- err
		})
	}
	for range n {
		<-started
	}
	// Let the goroutines reach the shared lookup, then release it.
	for inner.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(inner.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := inner.calls.Load(); got != 1 {
		t.Fatalf("%d lookups for one new token; want 1", got)
	}
}

// TestCacheWaiterCancellation: a waiter that gives up does not cancel the
// lookup the others share.
func TestCacheWaiterCancellation(t *testing.T) {
	inner := &counting{release: make(chan struct{})}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := c.Authenticate(ctx, "good-x"); first <- err }()
	for inner.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { _, err := c.Authenticate(context.Background(), "good-x"); second <- err }()
	cancel()
	if err := <-first; authn.ReasonOf(err) != authn.ValidatorTimeout {
		t.Fatalf("cancelled waiter: %v", err)
	}
	close(inner.release)
	if err := <-second; err != nil {
		t.Fatalf("the other waiter failed: %v", err)
	}
}

// TestCacheKeysOnAudiences: the cache answers for the audiences its
// inner layer states, and none when it states none; the verdict it
// keeps for a token under one audience list is not another's.
func TestCacheKeysOnAudiences(t *testing.T) {
	a := &counting{expiry: time.Now().Add(time.Hour)}
	c1 := authn.NewCache(a.layer(), authn.CacheConfig{})
	c2 := authn.NewCache(authn.Layer{Authenticator: a}, authn.CacheConfig{})
	if len(c2.Layer().Audiences) != 0 || len(c1.Layer().Audiences) != 1 {
		t.Fatal("audiences not passed through")
	}
	if l := c1.Layer(); l.Lacks != nil || !l.Cached() || l.Revoked != nil {
		t.Fatal("the cache's layer: Cached set, nothing stated its inner layer does not state")
	}
}

// BenchmarkCacheHitVsAPIServer runs a verdict-cache hit beside a hit of
// the Kubernetes API server's own cached token authenticator
// (k8s.io/apiserver/pkg/authentication/token/cache, as the API server
// configures it: errors cached, 10 s success and failure TTLs), same token,
// same audiences in the context, side by side.
func BenchmarkCacheHitVsAPIServer(b *testing.B) {
	tok := "good" + testjwt.Expiring("system:serviceaccount:ns:sa", time.Now().Add(time.Hour))
	ctx := apiauth.WithAudiences(context.Background(), apiauth.Audiences{"aud"})
	b.Run("callerauth", func(b *testing.B) {
		c := authn.NewCache((&counting{expiry: time.Now().Add(time.Hour)}).layer(), authn.CacheConfig{})
		if _, err := c.Authenticate(ctx, tok); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Authenticate(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apiserver", func(b *testing.B) {
		inner := apiauth.TokenFunc(func(_ context.Context, t string) (*apiauth.Response, bool, error) {
			return &apiauth.Response{User: &user.DefaultInfo{Name: "user-" + t}, Audiences: apiauth.Audiences{"aud"}}, true, nil
		})
		c := tokencache.New(inner, true, 10*time.Second, 10*time.Second)
		if _, ok, err := c.AuthenticateToken(ctx, tok); !ok || err != nil {
			b.Fatal(ok, err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := c.AuthenticateToken(ctx, tok); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}

// revocable is counting that also knows which users were revoked since,
// and which verdicts it can no longer vouch for (those reached before
// unvouched).
type revocable struct {
	counting
	revoked   sync.Map
	unvouched atomic.Int64 // unix nanoseconds; 0: every verdict vouched for
}

// layer is revocable as a layer that tells of revocations.
func (r *revocable) layer() authn.Layer {
	l := r.counting.layer()
	l.Authenticator, l.Revoked = r, r.Revoked
	return l
}

func (r *revocable) Revoked(c *authn.Caller, verified time.Time) error {
	if _, ok := r.revoked.Load(c.Username); ok {
		return authn.Fail(authn.TokenInvalid, "revoked")
	}
	if u := r.unvouched.Load(); u != 0 && verified.UnixNano() < u {
		return fmt.Errorf("view broken: %w", authn.ErrReverify)
	}
	return nil
}

// TestCacheAsksTheLayerOfRevocations: a cached success of an authenticator that knows
// revocations is checked with it on every hit; once revoked, the cached
// verdict is replaced by the refusal, without asking the authenticator
// again until the negative TTL has passed. A Recheck passes the question
// to its offline verifier.
func TestCacheAsksTheLayerOfRevocations(t *testing.T) {
	now := time.Unix(1700000000, 0)
	inner := &revocable{}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{TTL: time.Hour, NegativeTTL: 10 * time.Second, Now: func() time.Time { return now }})
	ctx := context.Background()
	for range 3 {
		if _, err := c.Authenticate(ctx, "good1"); err != nil {
			t.Fatal(err)
		}
	}
	inner.revoked.Store("user-good1", true)
	for range 3 {
		if _, err := c.Authenticate(ctx, "good1"); authn.ReasonOf(err) != authn.TokenInvalid {
			t.Fatalf("a cached caller, revoked since: %v", err)
		}
	}
	if n := inner.calls.Load(); n != 1 {
		t.Fatalf("inner called %d times; want 1", n)
	}
	if _, err := c.Authenticate(ctx, "good2"); err != nil {
		t.Fatalf("another caller: %v", err)
	}

	r, err := authn.NewRecheck(authn.RecheckConfig{Offline: inner.layer(), Review: (&counting{}).layer(), Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	revoked := r.Layer().Revoked
	if revoked == nil || revoked(&authn.Caller{Username: "user-good1"}, now) == nil || revoked(&authn.Caller{Username: "user-good2"}, now) != nil {
		t.Fatal("Recheck does not pass Revoked to its offline verifier")
	}
}

// TestCacheReverifiesWhatItsLayerCannotVouchFor: a cached success the
// authenticator can no longer vouch for (authn.ErrReverify: its
// bound-object view broke after the verdict was reached) is verified again
// — one more inner call, counted as a miss and a reverification — and
// the fresh verdict, reached after that moment, is answered from the
// cache again.
func TestCacheReverifiesWhatItsLayerCannotVouchFor(t *testing.T) {
	now := time.Unix(1700000000, 0)
	inner := &revocable{}
	c := authn.NewCache(inner.layer(), authn.CacheConfig{TTL: time.Hour, Now: func() time.Time { return now }})
	ctx := context.Background()
	if _, err := c.Authenticate(ctx, "good1"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	inner.unvouched.Store(now.UnixNano())
	now = now.Add(time.Second)
	for range 3 {
		if caller, hit, err := c.AuthenticateCached(ctx, "good1"); err != nil || caller.Username != "user-good1" {
			t.Fatalf("%+v %v %v", caller, hit, err)
		}
	}
	if n := inner.calls.Load(); n != 2 {
		t.Fatalf("inner called %d times; want 2 (the first verdict verified again once, the second answered from the cache)", n)
	}
	if s := c.Stats(); s.Reverified != 1 || s.Misses != 2 || s.Hits != 2 {
		t.Fatalf("stats %+v; want 1 reverified, 2 misses, 2 hits", s)
	}
}

// TestCacheKeepsEachIssuersShare: one tenant's identity provider minting
// tokens by the thousand — and a flood of refused tokens beside it —
// evict their own verdicts once the cache is full, never those of an
// issuer holding less than its fair share (MaxEntries / active issuers:
// 33 of 100 here); an issuer alone still fills an idle cache whole.
// Before, one LRU list: the flood evicted every other tenant's verdicts.
func TestCacheKeepsEachIssuersShare(t *testing.T) {
	var calls atomic.Int64
	inner := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		calls.Add(1)
		iss, _, _ := strings.Cut(tok, "/")
		if iss == "bad" {
			return nil, authn.Fail(authn.TokenInvalid, "bad")
		}
		return &authn.Caller{Username: "u-" + tok, Issuer: "https://" + iss}, nil
	})
	ctx := context.Background()
	c := authn.NewCache(authn.Layer{Authenticator: inner}, authn.CacheConfig{TTL: time.Hour, MaxEntries: 100})
	for i := range 100 {
		if _, err := c.Authenticate(ctx, fmt.Sprintf("a/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 100 {
		t.Fatalf("one issuer alone holds %d of 100 entries; want the whole idle cache", c.Len())
	}
	for i := range 30 {
		if _, err := c.Authenticate(ctx, fmt.Sprintf("b/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 { // issuer a mints on, and refused tokens arrive
		_, _ = c.Authenticate(ctx, fmt.Sprintf("a/x%d", i))
		_, _ = c.Authenticate(ctx, fmt.Sprintf("bad/%d", i))
	}
	before := calls.Load()
	for i := range 30 {
		if _, err := c.Authenticate(ctx, fmt.Sprintf("b/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load() - before; n != 0 {
		t.Fatalf("issuer b's 30 verdicts: %d verified again after issuer a's flood; want all still cached", n)
	}
}
