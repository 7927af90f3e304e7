package controller

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestFairGateTakesTurns: with one slot, a tenant with 32 calls waiting
// and another with one, the other's call gets the slot after at most one
// of the first tenant's — never after all of them; each tenant's calls
// keep their order; a call that gives up leaves the queue, and a slot
// handed to a call that has just given up goes on to the next.
func TestFairGateTakesTurns(t *testing.T) {
	g := newFairGate(1, 1, time.Now)
	ctx := context.Background()
	if err := g.acquire(ctx, "a"); err != nil { // the slot, held
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	wait := func(tenant, name string) {
		if err := g.acquire(ctx, tenant); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
	}
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); g.waiting() != n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls waiting, want %d", g.waiting(), n)
			}
		}
	}
	for i := range 32 {
		go wait("a", string(rune('A'+i)))
		queued(i + 1) // in this order
	}
	go wait("b", "b")
	queued(33)
	granted := func() []string {
		t.Helper()
		mu.Lock()
		n := len(order)
		mu.Unlock()
		g.release()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			if len(order) == n+1 {
				got := append([]string(nil), order...)
				mu.Unlock()
				return got
			}
			mu.Unlock()
			if time.Now().After(deadline) {
				t.Fatal("a release handed the slot to nobody")
			}
		}
	}
	granted()
	if got := granted(); got[0] != "A" || got[1] != "b" {
		t.Fatalf("grants %q: want a's oldest call, then b's, before a's 31 others", got)
	}
	for range 31 {
		granted()
	}
	mu.Lock()
	for i, name := range order[2:] {
		if name != string(rune('B'+i)) {
			t.Fatalf("a's calls out of order: %q", order)
		}
	}
	mu.Unlock()
	// A call that gives up leaves its queue; the slot goes on.
	gone, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- g.acquire(gone, "c") }()
	queued(1)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a call that gave up got the slot")
	}
	if g.waiting() != 0 {
		t.Fatalf("%d calls waiting after the only one gave up", g.waiting())
	}
	g.release() // the slot of the last of a's calls
	if err := g.acquire(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	g.release()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != 1 || len(g.turn) != 0 || len(g.queues) != 0 {
		t.Fatalf("the gate at rest: free %d, turn %v, queues %v", g.free, g.turn, g.queues)
	}
}

// TestFairGatePacesATenantOverItsShare, on a clock of the test's: a
// tenant alone is never held back, however much of the datastore its
// calls hold; once another tenant is active, the busy one is held to its
// share of the datastore's time (a half), and the other, under its share,
// is never held back.
func TestFairGatePacesATenantOverItsShare(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := newFairGate(1, 0.5, func() time.Time { return now })
	slept := time.Duration(0)
	g.sleep = func(_ context.Context, d time.Duration) error { now = now.Add(d); slept += d; return nil }
	ctx := context.Background()
	call := func(tenant string, hold time.Duration) {
		t.Helper()
		done, err := g.enter(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(hold)
		done()
	}
	for range 1000 { // a alone, back to back
		call("a", time.Millisecond)
	}
	if n := g.paced.Load(); n != 0 {
		t.Fatalf("a tenant alone was held back %d times", n)
	}
	// b active, a busy: over 2,000 of a's calls, a holds the datastore
	// about half the time; b, calling every 10 ms for 1 ms, never waits.
	start, held := now, time.Duration(0)
	for i := range 2000 {
		if i%10 == 0 {
			before := g.paced.Load()
			call("b", time.Millisecond)
			if g.paced.Load() != before {
				t.Fatalf("b, under its share, was held back")
			}
		}
		call("a", time.Millisecond)
		held += time.Millisecond
	}
	share := float64(held) / float64(now.Sub(start))
	if share < 0.4 || share > 0.55 {
		t.Fatalf("a held the datastore %.2f of the time with b active, want about 0.5 (slept %s over %s)", share, slept, now.Sub(start))
	}
	t.Logf("a's share with b active: %.3f; held back %d times", share, g.paced.Load())
}
