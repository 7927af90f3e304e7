package kube

import (
	"context"
	"time"
)

// proof is a consistent list's answer: the cluster had reached resource
// version rv when it was asked at at.
type proof struct {
	at time.Time
	rv uint64
}

// maxPending bounds the proofs waiting for the store; the oldest is
// dropped first (a later one proves more).
const maxPending = 8

// proving asks for a proof every timeout until ctx ends; after a failed
// one, again sooner (from a quarter of a second, doubling up to the
// timeout), so that a view stopped by a short failure — an API server not
// ready yet at start-up — answers again within a second or so.
func (w *watched) proving(ctx context.Context) {
	retry := time.Duration(0)
	for {
		at := w.now()
		pctx, cancel := context.WithTimeout(ctx, w.timeout)
		rv, err := w.prove(pctx)
		cancel()
		next := w.timeout - w.now().Sub(at)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.fail(w.now())
			retry = min(max(2*retry, proofRetry), w.timeout)
			next = retry
		default:
			retry = 0
			w.proved(proof{at: at, rv: rv})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(next, 0)):
		}
	}
}

// proofRetry is the first wait after a failed proof.
const proofRetry = 250 * time.Millisecond

// proved records a proof; it vouches for the store as soon as the store
// has applied its resource version.
func (w *watched) proved(p proof) {
	w.mu.Lock()
	if w.applied < p.rv {
		if len(w.pending) == maxPending {
			w.pending = append(w.pending[:0], w.pending[1:]...)
		}
		w.pending = append(w.pending, p)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.vouch(p.at)
}

// reached records that the store has applied resource version rv, and
// vouches for it as of the latest proof that rv completes.
func (w *watched) reached(rv string) {
	n, err := parseRV(rv)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.applied = max(w.applied, n)
	var at time.Time
	i := 0
	for ; i < len(w.pending) && w.pending[i].rv <= w.applied; i++ {
		at = w.pending[i].at
	}
	w.pending = append(w.pending[:0], w.pending[i:]...)
	w.mu.Unlock()
	if !at.IsZero() {
		w.vouch(at)
	}
}

// vouch records that the store holds every change made before t.
func (w *watched) vouch(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.After(w.vouched) {
		w.vouched = t
	}
	if !w.failed.IsZero() && w.vouched.After(w.failed) {
		w.failed = time.Time{}
	}
}

// fail records that a watch or a proof failed at t: the view does not
// answer until a proof asked after t completes.
func (w *watched) fail(t time.Time) {
	w.failures.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed.IsZero() {
		w.failed = t
	}
}

// state is what the view can vouch for at now: whether it has listed,
// since when it cannot vouch (zero: it can), and since when its store is
// known complete.
func (w *watched) state(now time.Time, maxBreak time.Duration) (synced bool, brokenSince, vouched time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.synced {
		return false, time.Time{}, w.vouched
	}
	stale := w.vouched.Add(maxBreak)
	switch {
	case !w.failed.IsZero() && w.failed.Before(stale):
		return true, w.failed, w.vouched
	case !now.Before(stale):
		return true, stale, w.vouched
	}
	return true, time.Time{}, w.vouched
}
