package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Runnable is one part of a service that runs until its context ends — a
// listener, a reload loop. The signature is controller-runtime's
// manager.Runnable, so a service that runs under a manager (the vmafx
// operator) adds the same runnables to it.
type Runnable interface {
	// Start runs until ctx ends and then returns nil after cleaning up, or
	// returns an error as soon as it cannot go on.
	Start(ctx context.Context) error
}

// RunnableFunc adapts a function to a [Runnable].
type RunnableFunc func(ctx context.Context) error

// Start calls f.
func (f RunnableFunc) Start(ctx context.Context) error { return f(ctx) }

// runAll starts every runnable and waits for them. When ctx ends, each is
// asked to stop and runAll returns nil once all have (or the first error one
// of them returned while stopping). When one runnable fails — returns an
// error, or returns at all before ctx ended — the others are stopped and
// runAll returns that failure: a service whose listener died exits non-zero.
func runAll(ctx context.Context, runnables ...Runnable) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parent := ctx
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(runnables))
	var wg sync.WaitGroup
	for i, r := range runnables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- result{i, r.Start(ctx)}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	var first error
	for res := range results {
		err := res.err
		if err == nil && parent.Err() == nil {
			err = fmt.Errorf("serve: %s stopped on its own", name(runnables[res.i]))
		}
		if err != nil && first == nil {
			first = err
		}
		cancel()
	}
	return first
}

// runInOrder runs stages of runnables, all started at once, and stops
// them in order: when ctx ends, or one fails (returns an error, or
// returns at all before it was asked to stop), the first stage is asked
// to stop; each next stage only once every runnable of the one before
// has returned. It returns the first failure, or nil.
func runInOrder(ctx context.Context, stages ...[]Runnable) error {
	type result struct {
		stage, i int
		err      error
	}
	total := 0
	for _, st := range stages {
		total += len(st)
	}
	results := make(chan result, total)
	running := make([]int, len(stages))
	cancels := make([]context.CancelFunc, len(stages))
	for s, st := range stages {
		// Each stage stops when its turn comes, not when ctx ends.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		cancels[s] = cancel
		running[s] = len(st)
		for i, r := range st {
			go func() { results <- result{s, i, r.Start(sctx)} }()
		}
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	stopping := 0 // stages below it were asked to stop
	advance := func() {
		if stopping == 0 {
			cancels[0]()
			stopping = 1
		}
		for stopping < len(stages) && running[stopping-1] == 0 {
			cancels[stopping]()
			stopping++
		}
	}
	var first error
	done := ctx.Done()
	for left := total; left > 0; {
		select {
		case <-done:
			done = nil
			advance()
		case res := <-results:
			left--
			running[res.stage]--
			err := res.err
			if err == nil && res.stage >= stopping {
				err = fmt.Errorf("serve: %s stopped on its own", name(stages[res.stage][res.i]))
			}
			if err != nil && first == nil {
				first = err
			}
			if err != nil || stopping > 0 {
				advance()
			}
		}
	}
	return first
}

// Named gives a runnable a name for messages.
func Named(n string, r Runnable) Runnable { return named{n, r} }

type named struct {
	name string
	Runnable
}

func (n named) String() string { return n.name }

func name(r Runnable) string {
	if s, ok := r.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", r)
}

// httpServer serves Server on Listener until its context ends, then shuts
// down gracefully for at most ShutdownTimeout (default 10 s) before closing
// what is left.
type httpServer struct {
	Name            string
	Listener        net.Listener
	Server          *http.Server
	ShutdownTimeout time.Duration
}

func (h *httpServer) String() string { return h.Name }

// Start implements [Runnable].
func (h *httpServer) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- h.Server.Serve(h.Listener) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %s on %s: %w", h.Name, h.Listener.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(h.ShutdownTimeout))
	defer cancel()
	if err := h.Server.Shutdown(sctx); err != nil {
		_ = h.Server.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %s: %w", h.Name, err)
	}
	return nil
}

// grpcServer serves Server on Listener until its context ends, then stops
// gracefully for at most ShutdownTimeout (default 10 s) before stopping
// hard.
type grpcServer struct {
	Name            string
	Listener        net.Listener
	Server          *grpc.Server
	ShutdownTimeout time.Duration
}

func (g *grpcServer) String() string { return g.Name }

// Start implements [Runnable].
func (g *grpcServer) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- g.Server.Serve(g.Listener) }()
	select {
	case err := <-errc:
		if err == nil {
			err = errors.New("the server stopped")
		}
		return fmt.Errorf("serve: %s on %s: %w", g.Name, g.Listener.Addr(), err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { g.Server.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(orDefault(g.ShutdownTimeout)):
		g.Server.Stop()
	}
	if err := <-errc; err != nil { // Serve returns nil once stopped
		return fmt.Errorf("serve: %s: %w", g.Name, err)
	}
	return nil
}

// defaultShutdownTimeout is how long a server drains its requests.
const defaultShutdownTimeout = 10 * time.Second

func orDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return defaultShutdownTimeout
	}
	return d
}
