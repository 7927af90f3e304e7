package translog

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"
)

// DefaultWitnessTimeout bounds one add-checkpoint request.
const DefaultWitnessTimeout = 10 * time.Second

// maxWitnessAnswer bounds what a witness may answer.
const maxWitnessAnswer = 16 << 10

// witnessing pushes each new checkpoint to the policy's witnesses, one
// goroutine a witness, each taking only the newest checkpoint when it is
// free (a slow witness skips checkpoints; it never holds one back).
// Entries never wait for it.
type witnessing struct {
	l      *Log
	policy WitnessPolicy
	client *http.Client
	m      *witnessMetrics

	mu sync.Mutex
	// cosigs are the cosignature lines gathered for the checkpoint of
	// size size (the newest one any witness cosigned).
	size   int64
	note   []byte
	cosigs map[string][]byte
	// witnessed is the newest checkpoint with a quorum of cosignatures.
	witnessed Checkpoint
	// held is the size of the newest checkpoint each witness cosigned.
	held  map[string]int64
	boxes []chan Checkpoint
}

type witnessMetrics struct {
	size, lag   *prometheus.GaugeVec
	failures    *prometheus.CounterVec
	witnessSize prometheus.Gauge
	witnessTime prometheus.Gauge
}

func newWitnessMetrics(prefix string) *witnessMetrics {
	name := func(n string) string { return prefix + "_" + n }
	return &witnessMetrics{
		size:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("witness_cosigned_size"), Help: "The tree size of the newest checkpoint each witness cosigned."}, []string{"witness"}),
		lag:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("witness_lag_entries"), Help: "Entries the latest checkpoint holds beyond what each witness cosigned."}, []string{"witness"}),
		failures:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("witness_failures_total"), Help: "add-checkpoint requests that got no cosignature, by witness and why (unreachable, a status code, bad_cosignature, conflict)."}, []string{"witness", "why"}),
		witnessSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("witnessed_checkpoint_size"), Help: "The tree size of the newest checkpoint a quorum of witnesses cosigned."}),
		witnessTime: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("witnessed_checkpoint_timestamp_seconds"), Help: "When the newest checkpoint a quorum of witnesses cosigned was signed (Unix time)."}),
	}
}

func (m *witnessMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.size, m.lag, m.failures, m.witnessSize, m.witnessTime}
}

func newWitnessing(l *Log) *witnessing {
	client := l.cfg.WitnessClient
	if client == nil {
		client = &http.Client{}
	}
	w := &witnessing{l: l, policy: l.cfg.Witnesses, client: client, m: newWitnessMetrics(l.cfg.Metrics), cosigs: map[string][]byte{}, held: map[string]int64{}}
	for range w.policy.Witnesses {
		w.boxes = append(w.boxes, make(chan Checkpoint, 1))
	}
	return w
}

// offer hands a new checkpoint to every witness, replacing one not yet
// taken.
func (w *witnessing) offer(c Checkpoint) {
	for _, box := range w.boxes {
		select {
		case <-box:
		default:
		}
		box <- c
	}
	w.lagged(c.Size)
}

// run pushes what is offered until stop is closed, trying a checkpoint
// a witness did not cosign again (after 1 s, doubling to a minute) until
// it does or a newer one comes; then each witness is given the last
// checkpoint once more (each request bounded by Config.WitnessTimeout)
// and run returns.
func (w *witnessing) run(stop <-chan struct{}) {
	var wg sync.WaitGroup
	for i := range w.policy.Witnesses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			known := int64(-1) // the size the witness holds; -1: not yet asked
			var pending *Checkpoint
			backoff := witnessBackoff
			for {
				var retry <-chan time.Time
				if pending != nil {
					retry = time.After(backoff)
				}
				select {
				case <-stop:
					select {
					case c := <-w.boxes[i]:
						pending = &c
					default:
					}
					if pending != nil {
						w.push(i, &known, *pending)
					}
					return
				case c := <-w.boxes[i]:
					pending, backoff = &c, witnessBackoff
				case <-retry:
					backoff = min(2*backoff, maxWitnessBackoff)
				}
				if w.push(i, &known, *pending) {
					pending, backoff = nil, witnessBackoff
				}
			}
		}()
	}
	wg.Wait()
}

// How soon a checkpoint a witness did not cosign is tried again.
const (
	witnessBackoff    = time.Second
	maxWitnessBackoff = time.Minute
)

// push gives witness i checkpoint c (known is the size it holds) and
// reports whether it cosigned it.
func (w *witnessing) push(i int, known *int64, c Checkpoint) bool {
	wit := w.policy.Witnesses[i]
	if c.Size == *known {
		return true
	}
	for try := 0; ; try++ {
		old := max(*known, 0)
		sigs, got, err := w.add(wit, old, c)
		if err == nil {
			*known = c.Size
			w.cosigned(wit, c, sigs)
			return true
		}
		// A conflict tells the size the witness holds: one try more
		// from there.
		if got >= 0 && got != old && got <= c.Size && try == 0 {
			*known = got
			continue
		}
		why := "unreachable"
		var se statusError
		switch {
		case got >= 0:
			why = "conflict"
		case errors.As(err, &se):
			why = strconv.Itoa(int(se))
		case errors.Is(err, errBadCosignature):
			why = "bad_cosignature"
		}
		w.m.failures.WithLabelValues(wit.Name, why).Inc()
		w.l.logError("witness "+wit.Name+" did not cosign the checkpoint of "+strconv.FormatInt(c.Size, 10), err)
		return false
	}
}

type statusError int

func (e statusError) Error() string { return "status " + strconv.Itoa(int(e)) }

var errBadCosignature = errors.New("no cosignature that verifies")

// add is one add-checkpoint request (C2SP tlog-witness): the witness's
// cosignature lines, or, on 409 with a size, that size (else -1).
func (w *witnessing) add(wit Witness, old int64, c Checkpoint) ([]byte, int64, error) {
	var body bytes.Buffer
	fmt.Fprintf(&body, "old %d\n", old)
	if old > 0 && old < c.Size {
		proof, err := w.l.ProveTree(c.Size, old)
		if err != nil {
			return nil, -1, err
		}
		for _, h := range proof {
			body.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
		}
	}
	body.WriteString("\n")
	body.Write(c.Note)
	// Not the log's context: the last checkpoint goes out as the log stops.
	rctx, cancel := context.WithTimeout(context.Background(), w.l.cfg.WitnessTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, wit.URL+"/add-checkpoint", &body)
	if err != nil {
		return nil, -1, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, -1, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxWitnessAnswer+1))
	switch {
	case err != nil:
		return nil, -1, err
	case len(answer) > maxWitnessAnswer:
		return nil, -1, fmt.Errorf("an answer over %d bytes", maxWitnessAnswer)
	case resp.StatusCode == http.StatusConflict && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/x.tlog.size"):
		n, err := strconv.ParseInt(strings.TrimSuffix(string(answer), "\n"), 10, 64)
		if err != nil || n < 0 {
			return nil, -1, fmt.Errorf("409 with size %q", answer)
		}
		return nil, n, fmt.Errorf("409: the witness holds the tree of %d, not %d", n, old)
	case resp.StatusCode != http.StatusOK:
		return nil, -1, fmt.Errorf("%w: %s", statusError(resp.StatusCode), strings.TrimSpace(string(answer)))
	}
	// Keep the lines of this witness's key whose cosignature verifies.
	var keep []byte
	for _, line := range strings.SplitAfter(string(answer), "\n") {
		if line == "" {
			continue
		}
		n, err := note.Open(append(append([]byte{}, c.Note...), line...), note.VerifierList(w.l.verifier, wit.verifier))
		if err != nil || !hasSig(n, wit.verifier) {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			line += "\n"
		}
		keep = append(keep, line...)
	}
	if keep == nil {
		return nil, -1, errBadCosignature
	}
	return keep, -1, nil
}

func hasSig(n *note.Note, v note.Verifier) bool {
	for _, s := range n.Sigs {
		if s.Name == v.Name() && s.Hash == v.KeyHash() {
			return true
		}
	}
	return false
}

// cosigned gathers a witness's cosignature of c; with a quorum, c is
// the witnessed checkpoint (its file, witnessed-checkpoint, rewritten) and, while it is the
// latest, the checkpoint served carries them.
func (w *witnessing) cosigned(wit Witness, c Checkpoint, sigs []byte) {
	w.m.size.WithLabelValues(wit.Name).Set(float64(c.Size))
	w.mu.Lock()
	w.held[wit.Name] = max(w.held[wit.Name], c.Size)
	// Its lag behind the latest checkpoint, before anything says it
	// cosigned.
	latest, _ := w.l.Latest()
	w.m.lag.WithLabelValues(wit.Name).Set(float64(max(latest.Size-w.held[wit.Name], 0)))
	if c.Size > w.size {
		w.size, w.note, w.cosigs = c.Size, c.Note, map[string][]byte{}
	}
	if c.Size < w.size {
		w.mu.Unlock()
		return
	}
	w.cosigs[wit.Name] = sigs
	cosigned := append([]byte{}, w.note...)
	for _, x := range w.policy.Witnesses { // in the policy's order
		cosigned = append(cosigned, w.cosigs[x.Name]...)
	}
	quorum := len(w.cosigs) >= w.policy.Quorum && c.Size > w.witnessed.Size
	if quorum {
		w.witnessed = Checkpoint{Size: c.Size, Root: c.Root, Note: cosigned}
	}
	w.mu.Unlock()
	if quorum {
		if err := writeFile(filepath.Join(w.l.dir, "witnessed-checkpoint"), cosigned, ""); err != nil {
			w.l.logError("writing the witnessed checkpoint failed", err)
		}
		w.m.witnessSize.Set(float64(c.Size))
		// A checkpoint read back at start has no signing time here (and
		// checkpoint_timestamp_seconds is 0 until this process signs):
		// the gauge waits for one this process signed.
		if !c.Signed.IsZero() {
			w.m.witnessTime.Set(float64(c.Signed.Unix()))
		}
	}
	w.l.mu.Lock()
	if w.l.latest.Size == c.Size {
		w.l.latest.Note = cosigned
	}
	w.l.mu.Unlock()
}

// lagged sets each witness's lag behind the latest checkpoint.
func (w *witnessing) lagged(latest int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wit := range w.policy.Witnesses {
		w.m.lag.WithLabelValues(wit.Name).Set(float64(max(latest-w.held[wit.Name], 0)))
	}
}

// loadWitnessed reads the witnessed checkpoint a run before wrote, if
// its quorum still holds and the tree extends it.
func (w *witnessing) loadWitnessed() error {
	b, err := os.ReadFile(filepath.Join(w.l.dir, "witnessed-checkpoint"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	n, _, err := w.policy.Cosigners(b, w.l.verifier)
	if err != nil {
		w.l.logError("the witnessed checkpoint left by an earlier run no longer meets the policy; it is set aside", err)
		return nil
	}
	origin, size, root, err := ParseCheckpoint(n.Text)
	switch {
	case err != nil:
		return fmt.Errorf("the witnessed checkpoint: %w", err)
	case origin != w.l.origin:
		return fmt.Errorf("the witnessed checkpoint is of %q", origin)
	case size > w.l.t.size:
		return fmt.Errorf("the witnessed checkpoint holds %d entries, the log %d", size, w.l.t.size)
	}
	if size > 0 {
		if r, err := w.l.TreeHash(size); err != nil || r != root {
			return fmt.Errorf("the witnessed checkpoint of %d is not a prefix of the log", size)
		}
	}
	w.witnessed = Checkpoint{Size: size, Root: root, Note: b}
	w.m.witnessSize.Set(float64(size))
	return nil
}

// Witnessed is the newest checkpoint a quorum of Config.Witnesses
// cosigned, with their cosignatures; ok is false while there is none (or
// no policy). It is served as <prefix>/witnessed-checkpoint.
func (l *Log) Witnessed() (Checkpoint, bool) {
	if l.witnesses == nil {
		return Checkpoint{}, false
	}
	l.witnesses.mu.Lock()
	defer l.witnesses.mu.Unlock()
	return l.witnesses.witnessed, l.witnesses.witnessed.Note != nil
}
