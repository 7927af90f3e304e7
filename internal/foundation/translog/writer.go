package translog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WriterConfig is what NewWriter needs.
type WriterConfig struct {
	Log *Log
	// MaxBatch bounds the entries one transaction appends. Default 512.
	MaxBatch int
	// MaxQueue bounds the entries waiting for a transaction: beyond it
	// Append refuses (ErrQueueFull) and Offer drops. Default 8192.
	MaxQueue int
	// SignEvery is how often a checkpoint is signed while the log grows.
	// Default 1 s.
	SignEvery time.Duration
	// Linger is how long the writer lets entries that nobody waits for
	// (Offer) gather before it commits them, unless MaxBatch gather
	// first or an entry with a waiter (Append) arrives: fewer, larger
	// transactions for entries whose commit holds up no answer. 0: each
	// transaction starts as soon as the store is free.
	Linger time.Duration
	// PruneEvery is how often Retention is applied. Default 1 minute.
	PruneEvery time.Duration
	// Retention bounds the log (Log.Prune).
	Retention Retention
	// Logger receives a line per failed transaction, checkpoint or prune;
	// nil: none.
	Logger *slog.Logger
	// Metrics prefixes the writer's metric names: the service's
	// (pdp: pdp_decision_log_appended_total, …).
	Metrics string
	// Committed, when set, is told of every transaction that committed:
	// its first index and its entries. It must not block.
	Committed func(first int64, entries []Entry)
}

// ErrQueueFull refuses an entry the writer has no room for: the store is
// slower than the decisions it is asked to keep.
var ErrQueueFull = errors.New("translog: the queue of entries waiting for the store is full")

// ErrStopped refuses an entry after the writer stopped.
var ErrStopped = errors.New("translog: the writer has stopped")

// Writer appends entries by group commit: whatever waits when the store
// is free goes in one transaction (up to MaxBatch), so a busy service
// pays one commit for many entries. It signs a checkpoint every SignEvery
// while the log grows, and prunes to its retention every PruneEvery. Run
// it with Start.
type Writer struct {
	cfg     WriterConfig
	mu      sync.Mutex
	queue   []pending
	waiters int // entries in queue whose caller waits (Append)
	wake    chan struct{}
	stopped bool
	ready   atomic.Bool

	appended, dropped, failed prometheus.Counter
	queued, size, minIndex    prometheus.Gauge
	batch, commit             prometheus.Histogram
}

type pending struct {
	e    Entry
	done chan<- result // nil: offered, nobody waits
}

type result struct {
	index int64
	err   error
}

// NewWriter checks cfg and fills its defaults.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Log == nil {
		return nil, errors.New("translog: a writer needs a log")
	}
	if cfg.Metrics == "" {
		return nil, errors.New("translog: a writer needs its metrics' prefix (the service's name)")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 512
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 8192
	}
	if cfg.SignEvery <= 0 {
		cfg.SignEvery = time.Second
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = time.Minute
	}
	if cfg.Retention.MaxAge < 0 || cfg.Retention.MaxEntries < 0 {
		return nil, fmt.Errorf("translog: retention %+v: want non-negative bounds", cfg.Retention)
	}
	name := func(n string) string { return cfg.Metrics + "_decision_log_" + n }
	return &Writer{cfg: cfg, wake: make(chan struct{}, 1),
		appended: prometheus.NewCounter(prometheus.CounterOpts{Name: name("appended_total"), Help: "Entries committed to the decision log."}),
		dropped:  prometheus.NewCounter(prometheus.CounterOpts{Name: name("dropped_total"), Help: "Entries not kept because the queue was full or the writer had stopped (refused to a caller that waited, or dropped when offered)."}),
		failed:   prometheus.NewCounter(prometheus.CounterOpts{Name: name("failed_total"), Help: "Entries whose transaction failed: not in the log."}),
		queued:   prometheus.NewGauge(prometheus.GaugeOpts{Name: name("queue_entries"), Help: "Entries waiting for a transaction."}),
		size:     prometheus.NewGauge(prometheus.GaugeOpts{Name: name("checkpoint_size"), Help: "The log's size at the latest checkpoint this process signed."}),
		minIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("min_index"), Help: "The log's minimum index: entries below it were pruned."}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("batch_entries"), Help: "Entries a transaction appended.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 6)}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("commit_seconds"), Help: "How long a transaction of entries took.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}),
	}, nil
}

// Collectors are the writer's metrics.
func (w *Writer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{w.appended, w.dropped, w.failed, w.queued, w.size, w.minIndex, w.batch, w.commit}
}

// Append queues e and waits until its transaction commits (or ctx ends):
// its index, or why it is not in the log. A full queue refuses at once
// (ErrQueueFull).
func (w *Writer) Append(ctx context.Context, e Entry) (int64, error) {
	idx, errs := w.AppendAll(ctx, []Entry{e})
	return idx[0], errs[0]
}

// AppendAll queues es together, so that one transaction takes them all
// when the batch has room, and waits for their commit (or for ctx to
// end): each entry's index, or why it is not in the log.
func (w *Writer) AppendAll(ctx context.Context, es []Entry) ([]int64, []error) {
	idx, errs := make([]int64, len(es)), make([]error, len(es))
	done := make([]chan result, len(es))
	ps := make([]pending, len(es))
	for i, e := range es {
		done[i] = make(chan result, 1)
		ps[i] = pending{e, done[i]}
	}
	w.enqueue(ps, errs)
	for i := range es {
		if errs[i] != nil {
			continue
		}
		select {
		case r := <-done[i]:
			idx[i], errs[i] = r.index, r.err
		case <-ctx.Done():
			errs[i] = fmt.Errorf("translog: waiting for the entry's commit: %w", ctx.Err())
		}
	}
	return idx, errs
}

// Offer queues e without waiting for its commit: false when the queue is
// full or the writer stopped (counted as dropped).
func (w *Writer) Offer(e Entry) bool {
	var err [1]error
	w.enqueue([]pending{{e, nil}}, err[:])
	return err[0] == nil
}

// enqueue queues ps under one lock, setting errs[i] for each it refuses
// (too large, no room, stopped).
func (w *Writer) enqueue(ps []pending, errs []error) {
	queued := 0
	w.mu.Lock()
	for i, p := range ps {
		switch {
		case len(p.e.Data) == 0 || len(p.e.Data) > MaxEntryBytes:
			errs[i] = fmt.Errorf("translog: an entry of %d bytes: want 1 to %d", len(p.e.Data), MaxEntryBytes)
			continue
		case w.stopped:
			errs[i] = ErrStopped
		case len(w.queue) >= w.cfg.MaxQueue:
			errs[i] = ErrQueueFull
		}
		if errs[i] != nil {
			w.dropped.Inc()
			continue
		}
		w.queue = append(w.queue, p)
		if p.done != nil {
			w.waiters++
		}
		queued++
	}
	w.queued.Set(float64(len(w.queue)))
	w.mu.Unlock()
	if queued > 0 {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Ready reports whether the writer runs and its last transaction, if any,
// committed.
func (w *Writer) Ready() bool { return w.ready.Load() }

// Start appends what is queued until ctx ends, then appends what is still
// queued (with a deadline of its own), signs a last checkpoint and
// returns; later entries are refused (ErrStopped).
func (w *Writer) Start(ctx context.Context) error {
	w.ready.Store(true)
	sign := time.NewTicker(w.cfg.SignEvery)
	defer sign.Stop()
	prune := time.NewTicker(w.cfg.PruneEvery)
	defer prune.Stop()
	var signed int64 = -1
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.stopped = true
			w.mu.Unlock()
			drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			for w.flush(drain) {
			}
			w.checkpoint(drain, &signed)
			cancel()
			w.ready.Store(false)
			return nil
		case <-w.wake:
			if !w.linger(ctx) {
				continue // stopping: the drain above commits what waits
			}
			for w.flush(ctx) {
			}
		case <-sign.C:
			w.checkpoint(ctx, &signed)
		case <-prune.C:
			w.prune(ctx)
		}
	}
}

// linger waits up to Linger for entries to gather, while nobody waits
// for one and fewer than MaxBatch are queued; false when ctx ended.
func (w *Writer) linger(ctx context.Context) bool {
	if w.cfg.Linger <= 0 {
		return true
	}
	gathered := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.waiters > 0 || len(w.queue) >= w.cfg.MaxBatch
	}
	t := time.NewTimer(w.cfg.Linger)
	defer t.Stop()
	for !gathered() {
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		case <-w.wake:
		}
	}
	return true
}

// flush appends up to MaxBatch queued entries in one transaction and
// tells their callers; it reports whether more wait.
func (w *Writer) flush(ctx context.Context) bool {
	w.mu.Lock()
	n := min(len(w.queue), w.cfg.MaxBatch)
	if n == 0 {
		w.mu.Unlock()
		return false
	}
	batch := make([]pending, n)
	copy(batch, w.queue)
	for _, p := range batch {
		if p.done != nil {
			w.waiters--
		}
	}
	w.queue = append(w.queue[:0], w.queue[n:]...)
	w.queued.Set(float64(len(w.queue)))
	more := len(w.queue) > 0
	w.mu.Unlock()

	entries := make([]Entry, n)
	for i, p := range batch {
		entries[i] = p.e
	}
	start := time.Now()
	first, err := w.cfg.Log.Append(ctx, entries...)
	w.commit.Observe(time.Since(start).Seconds())
	w.batch.Observe(float64(n))
	w.ready.Store(err == nil)
	if err != nil {
		w.failed.Add(float64(n))
		if w.cfg.Logger != nil {
			w.cfg.Logger.Error("decision log: a transaction failed; its entries are not in the log", "entries", n, "err", err)
		}
	} else {
		w.appended.Add(float64(n))
		if w.cfg.Committed != nil {
			w.cfg.Committed(first, entries)
		}
	}
	for i, p := range batch {
		if p.done != nil {
			p.done <- result{first + int64(i), err}
		}
	}
	return more
}

// checkpoint signs one when the log grew since the last.
func (w *Writer) checkpoint(ctx context.Context, signed *int64) {
	size, err := w.cfg.Log.Size(ctx)
	if err == nil && size == *signed {
		return
	}
	var c Checkpoint
	if err == nil {
		c, err = w.cfg.Log.Sign(ctx)
	}
	if err != nil {
		if w.cfg.Logger != nil {
			w.cfg.Logger.Error("decision log: signing a checkpoint failed", "err", err)
		}
		return
	}
	*signed = c.Size
	w.size.Set(float64(c.Size))
}

func (w *Writer) prune(ctx context.Context) {
	if w.cfg.Retention == (Retention{}) {
		return
	}
	m, err := w.cfg.Log.Prune(ctx, w.cfg.Retention)
	if err != nil {
		if w.cfg.Logger != nil {
			w.cfg.Logger.Error("decision log: pruning failed", "err", err)
		}
		return
	}
	w.minIndex.Set(float64(m))
}
