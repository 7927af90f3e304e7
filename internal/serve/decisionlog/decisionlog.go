// Package decisionlog is a service's decision log: every decision it
// makes — allowed and refused — kept as an entry of a tamper-evident log
// of its own (internal/foundation/translog, which knows nothing of
// decisions), with a retention, a size bound and a quota each caller
// pays from; a search index that follows the log (SQLite, or PostgreSQL
// that replicas share); and the read API that serves both to the readers
// it names, as a search and as C2SP tlog-tiles. docs/decision-log.md is
// the operator's page.
package decisionlog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/reason"
)

// The refusals the decision log adds to a service's.
var (
	// ReasonUnavailable: the decision could not be written to the log,
	// so it is not given (--decision-log-mode required).
	ReasonUnavailable = reason.New("decision_log_unavailable", reason.Unavailable, "the decision log could not keep this decision, so it is not given; retry")
	// ReasonQuotaExceeded: the caller holds its quota of the log's
	// entries within the retention.
	ReasonQuotaExceeded = reason.New("decision_log_quota_exceeded", reason.ResourceExhausted, "you hold your quota of the decision log's entries; retry when older ones age out")
)

// Reasons are the refusals a service with a decision log can send: in
// keeping an answer, and in its read API.
func Reasons() []reason.Reason {
	return []reason.Reason{ReasonUnavailable, ReasonQuotaExceeded, ReasonBadQuery, ReasonNotHeld, ReasonLogUnreadable, datastore.ReasonUnavailable}
}

// BestEffortLinger is how long a best-effort log lets decisions gather
// before it writes them (or until 256 have): nobody waits for them, so
// one write keeps many.
const BestEffortLinger = 10 * time.Millisecond

// Log is a service's open decision log: the log of its decisions
// (translog, in Options.Dir), the search index that follows it, the
// callers' shares, and the sink. Run it.
type Log struct {
	c       Config
	service string
	log     *translog.Log
	search  *search
	logger  *slog.Logger

	mu     sync.Mutex
	counts map[string]int64 // live entries by caller, as last counted plus what this process added
	since  map[string]int64 // admitted while a count runs

	quotaRefused prometheus.Counter
	sink         *Sink
	running      atomic.Bool
}

// Open opens the log and its search index for service (its name
// prefixes the metrics: service_decision_log_…). nil, nil when c asks for
// no log.
func Open(ctx context.Context, service string, c Config, logger *slog.Logger) (*Log, error) {
	if !c.On() {
		return nil, nil
	}
	durability, linger := translog.DurableGroups, time.Duration(0)
	if c.Mode == ModeBestEffort {
		durability, linger = translog.DurableCheckpoints, BestEffortLinger
	}
	prefix := service + "_decision_log"
	tl, err := translog.Open(translog.Config{Dir: c.Dir, Key: c.Key, Durability: durability, Linger: linger, SignEvery: c.SignEvery, MaxQueue: c.Queue,
		Retention: translog.Retention{MaxAge: c.MaxAge, MaxEntries: c.MaxEntries}, Witnesses: c.Witnesses, WitnessClient: c.WitnessClient,
		Metrics: prefix, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	s, err := openSearch(ctx, c.SearchTarget, tl, prefix, logger)
	if err != nil {
		return nil, fmt.Errorf("--decision-log-search: %w", err)
	}
	l := &Log{c: c, service: service, log: tl, search: s, logger: logger,
		quotaRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + "_quota_refusals_total", Help: "Decisions refused (or, for refusals, not kept) because the caller held --decision-log-caller-max-entries entries."})}
	if c.SinkURL != nil {
		rt, err := c.SinkClient.Transport()
		if err != nil {
			_ = s.db.Close()
			return nil, fmt.Errorf("--decision-log-sink: %w", err)
		}
		if l.sink, err = newSink(SinkConfig{URL: c.SinkURL, Client: &http.Client{Transport: rt, Timeout: 30 * time.Second}, Service: service,
			Buffer: c.SinkBuffer, MaxBatch: 500, Every: c.SinkEvery, MaxBackoff: time.Minute, Logger: logger, Metrics: service}, tl); err != nil {
			_ = s.db.Close()
			return nil, err
		}
	}
	if err := l.recount(ctx, false); err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	return l, nil
}

// Close closes the search index; Start must have returned.
func (l *Log) Close() error { return l.search.db.Close() }

// Translog is the log itself.
func (l *Log) Translog() *translog.Log { return l.log }

// Collectors are the log's metrics.
func (l *Log) Collectors() []prometheus.Collector {
	cs := append(l.log.Collectors(), l.quotaRefused)
	cs = append(cs, l.search.collectors()...)
	if l.sink != nil {
		cs = append(cs, l.sink.Collectors()...)
	}
	return cs
}

// Check is the log's readiness: it runs and takes entries (no write
// failed), and its search index answers.
func (l *Log) Check(ctx context.Context) error {
	if !l.running.Load() {
		return errors.New("the decision log is not running")
	}
	if err := l.log.Ready(); err != nil {
		return err
	}
	if err := l.search.db.PingContext(ctx); err != nil {
		return fmt.Errorf("the decision log's search index: %w", err)
	}
	return nil
}

// String names the runnable.
func (l *Log) String() string { return "decision log" }

// Start runs the log (groups, checkpoints, pruning), the search index that
// follows it, and the sink, and counts each caller's entries every
// minute, until ctx ends. The log stops first (what is queued written, a
// last checkpoint signed); the index and the sink then take what it
// kept, within 10 s, and stop.
func (l *Log) Start(ctx context.Context) error {
	l.running.Store(true)
	defer l.running.Store(false)
	followers, stopFollowers := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { l.search.run(followers) })
	if l.sink != nil {
		wg.Go(func() { _ = l.sink.Start(followers) })
	}
	logDone := make(chan error, 1)
	go func() { logDone <- l.log.Run(ctx) }()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case err := <-logDone:
			// The followers catch up with what the log kept, then stop.
			l.search.drain(10 * time.Second)
			stopFollowers()
			wg.Wait()
			return err
		case <-t.C:
			if err := l.recount(ctx, true); err != nil && l.logger != nil && ctx.Err() == nil {
				l.logger.Warn("decision log: counting callers' entries failed; the last counts stand", "err", err)
			}
		}
	}
}

// recount counts each caller's entries in the search index, once it
// holds what the log held when the count began; what callers were
// admitted meanwhile counts on top (twice, for those the index already
// had: the share errs towards refusing). Open counts at once, from the
// index as it stands.
func (l *Log) recount(ctx context.Context, wait bool) error {
	l.mu.Lock()
	l.since = map[string]int64{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.since = nil
		l.mu.Unlock()
	}()
	if wait {
		caught, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := l.search.caughtUp(caught, l.log.Size())
		cancel()
		if err != nil {
			return fmt.Errorf("the search index is behind the log: %w", err)
		}
	}
	counts, err := l.search.countByCaller(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
	for caller, n := range l.since {
		counts[caller] += n
	}
	l.counts = counts
	l.mu.Unlock()
	return nil
}

// Within refuses a caller that already holds its share of the log:
// what it asks now would not be kept, so a service need not work it out.
// The share is taken when a decision is kept (Keep), not here.
func (l *Log) Within(caller string) error {
	l.mu.Lock()
	n := l.counts[caller]
	l.mu.Unlock()
	if n >= l.c.CallerMaxEntries {
		l.quotaRefused.Inc()
		return l.overShare(caller)
	}
	return nil
}

func (l *Log) overShare(caller string) error {
	return fmt.Errorf("%q holds %d decisions in the log", caller, l.c.CallerMaxEntries)
}

// admit takes one entry of caller's quota, or reports it spent.
func (l *Log) admit(caller string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts[caller] >= l.c.CallerMaxEntries {
		return false
	}
	l.counts[caller]++
	if l.since != nil {
		l.since[caller]++
	}
	return true
}

// Decision is what a service logs of one decision.
type Decision struct {
	// Caller is the verified username; empty when none was verified.
	Caller  string
	System  string
	Tenant  string
	Allowed bool
	// Reason is the refusal's (or, allowed under audit, the violation's).
	Reason string
	// Method is the request's method, where it says more than the path
	// (callerauth-proxy's requests); empty: not kept.
	Method string
	// Path is the request's path; one over MaxPathBytes is kept as its
	// first MaxPathBytes bytes, its length beside it.
	Path string
	// Status is the HTTP status the service answered itself; 0 for a
	// request passed on (callerauth-proxy's upstream answers it).
	Status int
	// Answer is the answer given, JSON (the pdp's signed answer); nil for
	// a refusal.
	Answer json.RawMessage
	At     time.Time
}

// entry is a Decision as the log stores it: one JSON object, the leaf
// the tree hashes (docs/decision-log.md).
type entry struct {
	V       int    `json:"v"`
	Service string `json:"service"`
	At      string `json:"at"`
	Caller  string `json:"caller"`
	System  string `json:"system,omitempty"`
	Tenant  string `json:"tenant,omitempty"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	Method  string `json:"method,omitempty"`
	Path    string `json:"path"`
	// PathBytes is the length of a path over MaxPathBytes, of which Path
	// holds the first MaxPathBytes bytes.
	PathBytes int `json:"path_bytes,omitempty"`
	Status    int `json:"status"`
	// The answer, when there is one and it fits, follows as "answer".
	// AnswerDigest and AnswerBytes stand for an answer too large for an
	// entry (a batch of many evaluations): its SHA-256, and its size.
	AnswerDigest string `json:"answer_digest,omitempty"`
	AnswerBytes  int    `json:"answer_bytes,omitempty"`
}

// MaxPathBytes is the most of a request's path an entry keeps: a path is
// the client's to choose, the log's room is not.
const MaxPathBytes = 2048

func (l *Log) entry(d Decision) ([]byte, error) {
	e := entry{V: 1, Service: l.service, At: d.At.UTC().Format(time.RFC3339Nano), Caller: d.Caller, System: d.System,
		Tenant: d.Tenant, Allowed: d.Allowed, Reason: d.Reason, Method: d.Method, Path: d.Path, Status: d.Status}
	if len(e.Path) > MaxPathBytes {
		e.Path, e.PathBytes = strings.ToValidUTF8(e.Path[:MaxPathBytes], ""), len(d.Path)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	// The answer is the service's own JSON, checked when it was written:
	// spliced in as it is, not decoded and encoded again.
	answer := bytes.TrimSpace(d.Answer)
	if len(answer) > 0 {
		if len(b)+len(answer)+len(`,"answer":`) <= translog.MaxEntryBytes {
			b = append(append(append(b[:len(b)-1], `,"answer":`...), answer...), '}')
		} else {
			sum := sha256.Sum256(answer)
			e.AnswerDigest, e.AnswerBytes = "sha256:"+hex.EncodeToString(sum[:]), len(answer)
			if b, err = json.Marshal(e); err != nil {
				return nil, err
			}
		}
	}
	if len(b) > translog.MaxEntryBytes {
		return nil, fmt.Errorf("a decision of %d bytes without its answer: over the log's %d", len(b), translog.MaxEntryBytes)
	}
	return b, nil
}

// Keep logs an answer before it is given. Required: it returns once the
// decision is durable in the log, or the refusal to answer
// (ReasonUnavailable, ReasonQuotaExceeded); best-effort: once queued,
// never refusing for want of room. The zero reason: answer.
func (l *Log) Keep(ctx context.Context, d Decision) (reason.Reason, error) {
	k := l.KeepAll(ctx, []Decision{d})
	return k[0].Refusal, k[0].Err
}

// Kept is what keeping one decision came to: the zero Refusal, answer;
// else the refusal to send instead, and why.
type Kept struct {
	Refusal reason.Reason
	Err     error
}

// KeepAll keeps ds as Keep keeps each, together: under required, in one
// write and sync when the log's group has room (a group of answers
// signed together, kept together).
func (l *Log) KeepAll(ctx context.Context, ds []Decision) []Kept {
	out := make([]Kept, len(ds))
	es := make([][]byte, 0, len(ds))
	at := make([]int, 0, len(ds)) // es[j] is ds[at[j]]
	for i, d := range ds {
		if !l.admit(d.Caller) {
			l.quotaRefused.Inc()
			out[i] = Kept{ReasonQuotaExceeded, l.overShare(d.Caller)}
			continue
		}
		e, err := l.entry(d)
		if err != nil {
			out[i] = Kept{ReasonUnavailable, err}
			continue
		}
		es, at = append(es, e), append(at, i)
	}
	if len(es) == 0 {
		return out
	}
	g := l.log.AddAll(es)
	if l.c.Mode == ModeBestEffort {
		return out
	}
	for j := range es {
		if _, err := g.Wait(ctx, j); err != nil {
			out[at[j]] = Kept{ReasonUnavailable, err}
		}
	}
	return out
}

// Required reports whether every answer waits for its decision to be
// durable (--decision-log-mode required).
func (l *Log) Required() bool { return l.c.Mode == ModeRequired }

// Refused logs a refusal as the log has room and the caller quota: a
// refusal is never held up, nor changed, by its log.
func (l *Log) Refused(d Decision) {
	if !l.admit(d.Caller) {
		l.quotaRefused.Inc()
		return
	}
	if e, err := l.entry(d); err == nil {
		l.log.AddAll([][]byte{e})
	}
}

// Sign signs a checkpoint of the log as it stands now (the log signs
// one every --decision-log-sign-every while it grows).
func (l *Log) Sign(ctx context.Context) (translog.Checkpoint, error) { return l.log.Sign(ctx) }

// Indexed waits until the search index holds every decision the log
// holds now (or ctx ends).
func (l *Log) Indexed(ctx context.Context) error { return l.search.caughtUp(ctx, l.log.Size()) }

// Prune applies the retention now (the log does every minute), drops
// what it pruned from the search index, and returns the log's minimum
// index.
func (l *Log) Prune(ctx context.Context) (int64, error) {
	m, err := l.log.ApplyRetention(ctx)
	if err != nil {
		return m, err
	}
	return m, l.search.prune(ctx)
}

// Find returns the decisions q selects, as the read API's search does.
func (l *Log) Find(ctx context.Context, q Query) ([]Found, error) { return l.search.find(ctx, q) }
