package translog_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/internal/foundation/translog"
)

func newWriter(t *testing.T, l *translog.Log, cfg translog.WriterConfig) *translog.Writer {
	t.Helper()
	cfg.Log, cfg.Metrics = l, "svc"
	w, err := translog.NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run starts w and returns what stops it and waits for Start to return.
func run(w *translog.Writer) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Start(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// batches reads the writer's batch_entries histogram: transactions,
// entries, and transactions of more than 256 entries.
func batches(t *testing.T, w *translog.Writer) (count uint64, entries float64, big uint64) {
	t.Helper()
	var m dto.Metric
	if err := w.Collectors()[6].(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 256 {
			big = h.GetSampleCount() - b.GetCumulativeCount()
		}
	}
	return h.GetSampleCount(), h.GetSampleSum(), big
}

func TestWriterGroupCommits(t *testing.T) {
	ctx := context.Background()
	skey, _ := newKey(t)
	l, _ := open(t, filepath.Join(t.TempDir(), "log.db"), skey, nil)
	w := newWriter(t, l, translog.WriterConfig{MaxBatch: 512})
	// Queued before the writer runs: its first transactions take them
	// 512 at a time.
	for i := range 1000 {
		if !w.Offer(entry(i, time.Now())) {
			t.Fatalf("offer %d refused", i)
		}
	}
	stop := run(w)
	// Callers that wait: each learns its own index.
	var wg sync.WaitGroup
	idx := make([]int64, 50)
	errs := make([]error, 50)
	for i := range 50 {
		wg.Go(func() { idx[i], errs[i] = w.Append(ctx, entry(1000+i, time.Now())) })
	}
	wg.Wait()
	stop()
	seen := map[int64]bool{}
	for i := range 50 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if idx[i] < 1000 || idx[i] >= 1050 || seen[idx[i]] {
			t.Fatalf("caller %d got index %d (seen: %v)", i, idx[i], seen[idx[i]])
		}
		seen[idx[i]] = true
		e, err := l.Get(ctx, idx[i])
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Data) != string(entry(1000+i, time.Now()).Data) {
			t.Fatalf("index %d holds %s, want caller %d's entry", idx[i], e.Data, i)
		}
	}
	count, sum, big := batches(t, w)
	if sum != 1050 || big != 2 || count < 3 {
		t.Errorf("%d transactions (%d of over 256 entries) appended %v entries; want 1050 entries, the 1000 queued first in 2", count, big, sum)
	}
	if got := testutil.ToFloat64(w.Collectors()[0]); got != 1050 {
		t.Errorf("appended_total %v, want 1050", got)
	}
	// Stopping signed a checkpoint of everything.
	c, err := l.Latest(ctx)
	if err != nil || c.Size != 1050 {
		t.Fatalf("the last checkpoint: size %d (%v), want 1050", c.Size, err)
	}
	e, _ := l.Get(ctx, idx[7])
	p, err := l.ProveEntry(ctx, idx[7], c.Size)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckRecord(p, c.Size, c.Root, idx[7], tlog.RecordHash(e.Data)); err != nil {
		t.Error(err)
	}
	if _, err := w.Append(ctx, entry(2000, time.Now())); !errors.Is(err, translog.ErrStopped) {
		t.Errorf("Append after the writer stopped: %v, want ErrStopped", err)
	}
}

func TestWriterBounds(t *testing.T) {
	ctx := context.Background()
	skey, _ := newKey(t)
	l, db := open(t, filepath.Join(t.TempDir(), "log.db"), skey, nil)
	w := newWriter(t, l, translog.WriterConfig{MaxQueue: 3})
	for i := range 3 {
		if !w.Offer(entry(i, time.Now())) {
			t.Fatalf("offer %d of 3 refused", i)
		}
	}
	if w.Offer(entry(3, time.Now())) {
		t.Error("a fourth entry offered to a queue of 3 was taken")
	}
	start := time.Now()
	if _, err := w.Append(ctx, entry(4, time.Now())); !errors.Is(err, translog.ErrQueueFull) {
		t.Errorf("Append to a full queue: %v, want ErrQueueFull", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Append to a full queue waited %v", d)
	}
	if _, err := w.Append(ctx, translog.Entry{Data: make([]byte, translog.MaxEntryBytes+1)}); err == nil {
		t.Error("an entry over MaxEntryBytes was queued")
	}
	if got := testutil.ToFloat64(w.Collectors()[1]); got != 2 {
		t.Errorf("dropped_total %v, want 2", got)
	}
	// A store that fails: the waiting caller learns it, the entries are
	// counted failed, the writer is not ready.
	stop := run(w)
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(w.Collectors()[0]) != 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	_ = db.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := w.Append(actx, entry(5, time.Now())); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Append to a closed store: %v, want the store's error", err)
	}
	if got := testutil.ToFloat64(w.Collectors()[2]); got != 1 {
		t.Errorf("failed_total %v, want 1", got)
	}
	if w.Ready() {
		t.Error("ready after a failed transaction")
	}
}

// TestWriterLinger: offered entries wait for company (Linger), but not
// past a caller that waits, nor past a full batch; the writer's stop
// commits what lingers.
func TestWriterLinger(t *testing.T) {
	ctx := context.Background()
	skey, _ := newKey(t)
	l, _ := open(t, filepath.Join(t.TempDir(), "log.db"), skey, nil)
	w := newWriter(t, l, translog.WriterConfig{MaxBatch: 64, Linger: time.Hour})
	stop := run(w)
	for i := range 3 {
		if !w.Offer(entry(i, time.Now())) {
			t.Fatalf("offer %d refused", i)
		}
	}
	// A caller that waits takes the lingering entries with it: one
	// transaction of four, its entry the last.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	idx, err := w.Append(wait, entry(3, time.Now()))
	if err != nil || idx != 3 {
		t.Fatalf("Append: index %d, %v; want 3", idx, err)
	}
	if n, entries, _ := batches(t, w); n != 1 || entries != 4 {
		t.Fatalf("%d transactions of %.0f entries, want 1 of 4", n, entries)
	}
	// A full batch does not wait for the hour.
	for i := range 64 {
		if !w.Offer(entry(4+i, time.Now())) {
			t.Fatalf("offer %d refused", 4+i)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		size, err := l.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if size == 68 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a full batch lingered: the log holds %d entries, want 68", size)
		}
	}
	// Stopping commits what still lingers.
	if !w.Offer(entry(68, time.Now())) {
		t.Fatal("offer refused")
	}
	stop()
	if size, err := l.Size(ctx); err != nil || size != 69 {
		t.Fatalf("after the stop the log holds %d entries (%v), want 69", size, err)
	}
	if n, entries, _ := batches(t, w); n != 3 || entries != 69 {
		t.Fatalf("%d transactions of %.0f entries, want 3 of 69", n, entries)
	}
}
