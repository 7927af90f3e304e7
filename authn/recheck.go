package authn

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Recheck verifies every token offline and asks an authoritative
// authenticator only when it first sees a credential and again once per
// Interval: the Kubernetes API server's TokenReview is asked once per
// token per Interval, not once per cache TTL.
//
// The offline verifier (authn/oidc against the API server's own JWKS)
// checks what a signature can: issuer, signature, audience, expiry, the
// identity. What it cannot see is revocation — a token whose pod, secret
// or service account was deleted still verifies. TokenReview sees that, so
// a credential is reviewed when first seen (the pod was alive then) and
// again when its last review is Interval old: a deleted pod's token is
// refused at most Interval (plus the verdict cache's TTL, which sits in
// front) after the deletion. That is the trade-off, and Interval is the
// knob; docs/scale.md has the TokenReview rate it buys.
//
// A credential is told apart by its Caller.CredentialID (a token's jti);
// a token without one is reviewed every time the verdict cache misses, as
// without Recheck.
type Recheck struct {
	offline, review Authenticator
	interval        time.Duration
	max             int
	now             func() time.Time

	mu    sync.Mutex
	seen  map[string]time.Time // issuer and credential id → last review
	swept time.Time            // when lapsed reviews were last dropped
	stats RecheckStats
}

// RecheckConfig configures [NewRecheck].
type RecheckConfig struct {
	// Offline verifies a token without asking anyone: signature, issuer,
	// audience, expiry. Required.
	Offline Authenticator
	// Review is the authority that also sees revocation (TokenReview).
	// Required.
	Review Authenticator
	// Interval is how long a review of a credential stands: the longest a
	// revoked credential is still accepted. Required.
	Interval time.Duration
	// MaxEntries bounds the credentials remembered; when full, those whose
	// review is older than Interval are dropped, then the oldest. Default
	// 100000.
	MaxEntries int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// RecheckStats count what [Recheck] did.
type RecheckStats struct {
	Reviews  uint64 // asked the authority
	Offline  uint64 // answered from the offline verification and a standing review
	Refusals uint64 // refused offline, never reviewed
}

// NewRecheck returns the authenticator, or an error naming what is missing.
func NewRecheck(cfg RecheckConfig) (*Recheck, error) {
	switch {
	case cfg.Offline == nil || cfg.Review == nil:
		return nil, errors.New("authn: recheck needs an offline verifier and a reviewer")
	case cfg.Interval <= 0:
		return nil, errors.New("authn: recheck needs a positive interval")
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = 100000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recheck{offline: cfg.Offline, review: cfg.Review, interval: cfg.Interval, max: cfg.MaxEntries, now: cfg.Now, seen: map[string]time.Time{}}, nil
}

// RequiredAudiences are the reviewer's, for the verdict cache's key.
func (r *Recheck) RequiredAudiences() []string {
	if a, ok := r.review.(Audienced); ok {
		return a.RequiredAudiences()
	}
	return nil
}

// Authenticate verifies token offline and, when its credential has no
// review younger than Interval, reviews it.
func (r *Recheck) Authenticate(ctx context.Context, token string) (*Caller, error) {
	c, err := r.offline.Authenticate(ctx, token)
	if err != nil {
		r.mu.Lock()
		r.stats.Refusals++
		r.mu.Unlock()
		return nil, err
	}
	key := ""
	if c.CredentialID != "" {
		key = c.Issuer + "\x00" + c.CredentialID
	}
	now := r.now()
	r.mu.Lock()
	at, ok := r.seen[key]
	if key != "" && ok && now.Sub(at) < r.interval {
		r.stats.Offline++
		r.mu.Unlock()
		return c, nil
	}
	r.stats.Reviews++
	r.mu.Unlock()
	rc, err := r.review.Authenticate(ctx, token)
	if key == "" {
		return rc, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ReasonOf(err) == TokenInvalid {
			delete(r.seen, key) // revoked: never again offline
		}
		return nil, err
	}
	switch {
	case now.Sub(r.swept) >= r.interval:
		// Once per interval, forget the reviews that have lapsed (rotated
		// tokens, gone pods), so that the table holds what is live.
		r.sweep(now)
	case len(r.seen) >= r.max:
		r.evict(now)
	}
	r.seen[key] = now
	return rc, nil
}

func (r *Recheck) sweep(now time.Time) {
	for k, at := range r.seen {
		if now.Sub(at) >= r.interval {
			delete(r.seen, k)
		}
	}
	r.swept = now
}

// evict drops the credentials whose review has lapsed and, if that frees
// nothing, the oldest tenth.
func (r *Recheck) evict(now time.Time) {
	r.sweep(now)
	if len(r.seen) < r.max {
		return
	}
	cutoff := now
	for _, at := range r.seen {
		if at.Before(cutoff) {
			cutoff = at
		}
	}
	// Raise the cutoff until a tenth of the entries fall below it.
	step := r.interval / 10
	for len(r.seen) >= r.max-r.max/10 && step > 0 {
		cutoff = cutoff.Add(step)
		for k, at := range r.seen {
			if at.Before(cutoff) {
				delete(r.seen, k)
			}
		}
	}
}

// Stats returns the counts so far.
func (r *Recheck) Stats() RecheckStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Remembered is how many credentials have a review on record.
func (r *Recheck) Remembered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}
