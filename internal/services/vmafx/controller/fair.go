package controller

// One tenant's load must not cost another its latency: the controller's
// work on the datastore every tenant shares is handed out in turn, tenant
// by tenant, so that a tenant that sends as fast as it can waits behind
// its own requests, never another tenant behind all of them.

import (
	"context"
	"sync"

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
}

type waiter struct {
	ready   chan struct{}
	granted bool // the slot was handed over (under mu)
}

func newFairGate(slots int) *fairGate {
	return &fairGate{free: max(slots, 1), queues: map[string][]*waiter{}}
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
		if err := g.acquire(ctx, v.Caller.Tenant); err != nil {
			return nil, err
		}
		defer g.release()
		return handler(ctx, req)
	}
}
