package controller

// One tenant's load must not cost another its latency: the controller's
// work on the datastore every tenant shares is handed out in turn, tenant
// by tenant, so that a tenant that sends as fast as it can waits behind
// its own requests, never another tenant behind all of them.
//
// Turns alone leave one cost: a call that arrives while another tenant's
// holds the datastore waits out the rest of it (SQLite has one writer,
// and a submission's commit is an fsync). So each tenant's use of the
// datastore is measured — the time its calls hold a slot, averaged over
// the last second or so (an exponential decay) — and while another
// tenant has been served within the last second, a tenant over its share
// (--tenant-share, a half by default) has its next call held back until
// its use is down to the share. A tenant under its share, and a tenant
// alone, are never held back; the one over it finds the datastore free
// at least the rest of the time for everyone else.

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/callerauth/callerauth/guard"
)

// fairGate admits at most slots calls at once, and hands a freed slot to
// the tenants that wait in turn (round robin), each tenant's calls in
// their order. A tenant alone gets every slot; two tenants that both wait
// get one slot each in turn, however many calls each has waiting.
type fairGate struct {
	mu     sync.Mutex
	free   int
	queues map[string][]*waiter // each waiting tenant's calls, oldest first
	turn   []string             // the waiting tenants, next first

	slots int
	// share is the most of the datastore's time one tenant's calls hold
	// while another tenant is active (1: turns only, no pacing).
	share float64
	now   func() time.Time
	// paces are the tenants seen, each with its calls in flight and when
	// its next may start (under mu). Tenants are the configured issuers',
	// a bounded set.
	paces map[string]*pace
	// paced counts the calls held back by pacing.
	paced atomic.Uint64
	// sleep waits d or for ctx to end (a timer; a test's clock).
	sleep func(ctx context.Context, d time.Duration) error
}

// pace is one tenant's: at most slots of its calls in the gate at once,
// and its use of the datastore.
type pace struct {
	in chan struct{} // a slot per call of the tenant's in the gate
	// busy is the time its calls held a slot, decayed with time constant
	// useWindow as of at: busy/useWindow is its recent share.
	busy time.Duration
	at   time.Time
	seen time.Time // its last call's start
}

// useWindow is the time constant of a tenant's measured use, and how
// recently another tenant must have been served for a tenant to be held
// to its share.
const useWindow = time.Second

// decayed is p.busy as of now (under mu).
func (p *pace) decayed(now time.Time) time.Duration {
	if p.busy == 0 || !now.After(p.at) {
		return p.busy
	}
	return time.Duration(float64(p.busy) * math.Exp(-float64(now.Sub(p.at))/float64(useWindow)))
}

// holdBack is how long the tenant must wait at now for its use to come
// down to share (zero: it may go now) (under mu).
func (p *pace) holdBack(now time.Time, share float64) time.Duration {
	busy, limit := p.decayed(now), time.Duration(share*float64(useWindow))
	if busy <= limit {
		return 0
	}
	return time.Duration(float64(useWindow) * math.Log(float64(busy)/float64(limit)))
}

type waiter struct {
	ready   chan struct{}
	granted bool // the slot was handed over (under mu)
}

// newFairGate makes a gate of slots calls at once, each tenant holding
// the datastore at most share of the time while another is active
// (0 < share <= 1).
func newFairGate(slots int, share float64, now func() time.Time) *fairGate {
	slots = max(slots, 1)
	return &fairGate{free: slots, slots: slots, queues: map[string][]*waiter{}, share: share, now: now, paces: map[string]*pace{}, sleep: sleep}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enter admits one call of tenant: its place among the tenant's calls,
// its pace, then a slot. done ends the call.
func (g *fairGate) enter(ctx context.Context, tenant string) (done func(), err error) {
	g.mu.Lock()
	p := g.paces[tenant]
	if p == nil {
		p = &pace{in: make(chan struct{}, g.slots)}
		g.paces[tenant] = p
	}
	g.mu.Unlock()
	select {
	case p.in <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.mu.Lock()
	var wait time.Duration
	if now := g.now(); g.share < 1 && g.othersActive(tenant, now) {
		wait = p.holdBack(now, g.share*float64(g.slots)) // of every slot's time
	}
	g.mu.Unlock()
	if wait > 0 {
		g.paced.Add(1)
		if err := g.sleep(ctx, wait); err != nil {
			<-p.in
			return nil, err
		}
	}
	if err := g.acquire(ctx, tenant); err != nil {
		<-p.in
		return nil, err
	}
	g.mu.Lock()
	start := g.now()
	p.seen = start
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		end := g.now()
		p.busy = p.decayed(end) + end.Sub(start)
		p.at = end
		g.handOver()
		g.mu.Unlock()
		<-p.in
	}, nil
}

// othersActive: a tenant other than tenant has a call in the gate, or
// started one within useWindow (under mu).
func (g *fairGate) othersActive(tenant string, now time.Time) bool {
	for t, p := range g.paces {
		if t != tenant && (len(p.in) > 0 || now.Sub(p.seen) < useWindow) {
			return true
		}
	}
	return false
}

// acquire waits for a slot for tenant, or for ctx to end.
func (g *fairGate) acquire(ctx context.Context, tenant string) error {
	g.mu.Lock()
	if g.free > 0 && len(g.turn) == 0 {
		g.free--
		g.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	if len(g.queues[tenant]) == 0 {
		g.turn = append(g.turn, tenant)
	}
	g.queues[tenant] = append(g.queues[tenant], w)
	g.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		if w.granted {
			g.handOver() // the slot came as the caller left: pass it on
			return ctx.Err()
		}
		g.remove(tenant, w)
		return ctx.Err()
	}
}

// release frees a slot: the next waiting tenant's oldest call gets it.
func (g *fairGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handOver()
}

// handOver gives a free slot to the tenant whose turn it is (under mu).
func (g *fairGate) handOver() {
	if len(g.turn) == 0 {
		g.free++
		return
	}
	tenant := g.turn[0]
	g.turn = g.turn[1:]
	q := g.queues[tenant]
	w := q[0]
	if len(q) > 1 {
		g.queues[tenant] = q[1:]
		g.turn = append(g.turn, tenant) // its next call waits for its next turn
	} else {
		delete(g.queues, tenant)
	}
	w.granted = true
	close(w.ready)
}

// remove takes a waiter that gave up out of its tenant's queue (under mu).
func (g *fairGate) remove(tenant string, w *waiter) {
	q := g.queues[tenant]
	for i, x := range q {
		if x == w {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) > 0 {
		g.queues[tenant] = q
		return
	}
	delete(g.queues, tenant)
	for i, t := range g.turn {
		if t == tenant {
			g.turn = append(g.turn[:i:i], g.turn[i+1:]...)
			break
		}
	}
}

// waiting is how many calls wait, every tenant's.
func (g *fairGate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, q := range g.queues {
		n += len(q)
	}
	return n
}

// interceptor runs each call of an identified tenant under a slot of the
// gate: after the guard, so that a refused caller never waits.
func (g *fairGate) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		v, ok := guard.FromContext(ctx)
		if !ok || v.Caller == nil {
			return handler(ctx, req)
		}
		done, err := g.enter(ctx, v.Caller.Tenant)
		if err != nil {
			return nil, err
		}
		defer done()
		return handler(ctx, req)
	}
}
