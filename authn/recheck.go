package authn

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"
)

// Recheck verifies every token offline and asks an authoritative
// authenticator only when it first sees a token and again once per
// Interval: the Kubernetes API server's TokenReview is asked once per
// token per Interval, not once per cache TTL.
//
// The offline verifier (authn/oidc against the API server's own JWKS)
// checks what a signature can: issuer, signature, audience, expiry, the
// identity. What it cannot see is revocation — a token whose pod, secret
// or service account was deleted still verifies. TokenReview sees that, so
// a token is reviewed when first seen (the pod was alive then) and again
// when its last review is Interval old: a deleted pod's token is refused at
// most Interval (plus the verdict cache's TTL, which sits in front) after
// the deletion. That is the trade-off, and Interval is the knob;
// docs/scale.md has the TokenReview rate it buys.
//
// What a remembered review vouches for is exactly one token — it is kept
// under a SHA-256 of the whole token, never under a claim such as the jti,
// which is not secret — and the identity TokenReview returned for it: a
// request answered from a remembered review gets that identity, and an
// offline identity that differs from the reviewed one is refused
// (token_invalid) and counted. (The record keeps a digest of the reviewed
// identity, not the caller: a hit returns the offline caller once it names
// exactly that identity.) Every request is verified offline first, so
// a review stops vouching as soon as the key that signed its token leaves
// the JWKS (the offline refusal forgets it). When reviews of one token
// overlap, the one started last decides: a refusal is never overwritten by
// an older success.
type Recheck struct {
	offline, review Layer
	interval        time.Duration
	max             int
	now             func() time.Time

	mu    sync.Mutex
	seq   uint64                       // reviews started
	seen  map[[sha256.Size]byte]review // token hash → its latest review
	swept time.Time                    // when lapsed reviews were last dropped
	stats RecheckStats
}

// review is what a TokenReview of one token said, and when: the identity
// it returned is kept as a digest (the offline caller of the same token is
// returned when it names that very identity), which keeps a record small.
type review struct {
	at       time.Time
	seq      uint64            // the order in which the review started
	identity [sha256.Size]byte // of the reviewed identity
	accepted bool              // false: refused
}

// identityOf digests the identity fields [SameIdentity] compares.
func identityOf(c *Caller) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range []string{c.Username, c.UID, c.PodName, c.PodUID, c.NodeName, c.NodeUID} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// RecheckConfig configures [NewRecheck].
type RecheckConfig struct {
	// Offline verifies a token without asking anyone: signature, issuer,
	// audience, expiry. Required.
	Offline Layer
	// Review is the authority that also sees revocation (TokenReview).
	// Required.
	Review Layer
	// Interval is how long a review of a token stands: the longest a
	// revoked credential is still accepted. Required.
	Interval time.Duration
	// MaxEntries bounds the tokens remembered; when full, those whose
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
	// Mismatches are tokens whose offline identity differs from the one
	// TokenReview returned for them: refused.
	Mismatches uint64
}

// NewRecheck returns the authenticator, or an error naming what is missing.
func NewRecheck(cfg RecheckConfig) (*Recheck, error) {
	switch {
	case cfg.Offline.Authenticator == nil || cfg.Review.Authenticator == nil:
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
	return &Recheck{offline: cfg.Offline, review: cfg.Review, interval: cfg.Interval, max: cfg.MaxEntries, now: cfg.Now, seen: map[[sha256.Size]byte]review{}}, nil
}

// Layer is the recheck as a layer: the offline verifier's revocation,
// the reviewer's audiences (the verdict cache's key), and a fact either
// never states.
func (r *Recheck) Layer() Layer {
	return Layer{Authenticator: r, Audiences: r.review.Audiences, Revoked: r.offline.Revoked, Lacks: LacksEither(r.review, r.offline)}
}

// SameIdentity reports whether two callers name the same identity: user,
// UID, and the pod and node the credential is bound to.
func SameIdentity(a, b *Caller) bool {
	return a.Username == b.Username && a.UID == b.UID && a.PodName == b.PodName && a.PodUID == b.PodUID &&
		a.NodeName == b.NodeName && a.NodeUID == b.NodeUID
}

// Authenticate verifies token offline and, when no review of this very
// token younger than Interval stands, reviews it.
func (r *Recheck) Authenticate(ctx context.Context, token string) (*Caller, error) {
	key := sha256.Sum256([]byte(token))
	c, err := r.offline.Authenticator.Authenticate(ctx, token)
	if err != nil {
		r.mu.Lock()
		r.stats.Refusals++
		delete(r.seen, key) // its key left the JWKS, or it expired: vouch no more
		r.mu.Unlock()
		return nil, err
	}
	now := r.now()
	r.mu.Lock()
	if rv, ok := r.seen[key]; ok && rv.accepted && now.Sub(rv.at) < r.interval {
		if identityOf(c) != rv.identity {
			r.stats.Mismatches++
			r.mu.Unlock()
			return nil, Fail(TokenInvalid, "the offline identity %q differs from the one TokenReview returned for this token", c.Username)
		}
		r.stats.Offline++
		r.mu.Unlock()
		return c, nil // the identity TokenReview returned, field for field
	}
	r.stats.Reviews++
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	rc, err := r.review.Authenticator.Authenticate(ctx, token)
	if err == nil && !SameIdentity(c, rc) {
		r.mu.Lock()
		r.stats.Mismatches++
		r.mu.Unlock()
		return nil, Fail(TokenInvalid, "the offline identity %q differs from the one TokenReview returned (%q)", c.Username, rc.Username)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.seen[key]; ok && prev.seq > seq {
		// A review started after this one has already answered: it
		// decides (a refusal is never replaced by an older success).
		return rc, err
	}
	if err != nil && ReasonOf(err) != TokenInvalid {
		return nil, err // the reviewer failed: it said nothing about the token
	}
	switch {
	case now.Sub(r.swept) >= r.interval:
		// Once per interval, forget the reviews that have lapsed (rotated
		// tokens, gone pods), so that the table holds what is live.
		r.sweep(now)
	case len(r.seen) >= r.max:
		r.evict(now)
	}
	if err != nil {
		r.seen[key] = review{at: now, seq: seq} // refused: an older success cannot land over it
		return nil, err
	}
	r.seen[key] = review{at: now, seq: seq, identity: identityOf(rc), accepted: true}
	return rc, nil
}

func (r *Recheck) sweep(now time.Time) {
	for k, rv := range r.seen {
		if now.Sub(rv.at) >= r.interval {
			delete(r.seen, k)
		}
	}
	r.swept = now
}

// evict drops the reviews that have lapsed and, if that frees nothing,
// the oldest tenth.
func (r *Recheck) evict(now time.Time) {
	r.sweep(now)
	if len(r.seen) < r.max {
		return
	}
	cutoff := now
	for _, rv := range r.seen {
		if rv.at.Before(cutoff) {
			cutoff = rv.at
		}
	}
	// Raise the cutoff until a tenth of the entries fall below it.
	step := r.interval / 10
	for len(r.seen) >= r.max-r.max/10 && step > 0 {
		cutoff = cutoff.Add(step)
		for k, rv := range r.seen {
			if rv.at.Before(cutoff) {
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

// Remembered is how many tokens have a review on record.
func (r *Recheck) Remembered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}
