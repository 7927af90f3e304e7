// Package decisionlog is a service's decision log: every decision it
// makes — allowed and refused — appended to a tamper-evident log
// (internal/foundation/translog) in a datastore of its own (SQLite, or
// PostgreSQL shared by replicas), with a retention, a size bound and a
// quota each caller pays from, and served to the readers it names as
// C2SP tlog-tiles and a search. docs/decision-log.md is the operator's
// page.
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
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/credentials"
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
	return []reason.Reason{ReasonUnavailable, ReasonQuotaExceeded, ReasonBadQuery, ReasonNotHeld, datastore.ReasonUnavailable}
}

// The modes (--decision-log-mode).
const (
	// ModeRequired: an answer leaves only once its decision is committed
	// to the log; refusals are kept as the log has room.
	ModeRequired = "required"
	// ModeBestEffort: decisions are queued for the log and answered at
	// once; what the queue has no room for is dropped and counted.
	ModeBestEffort = "best-effort"
)

// BestEffortLinger is how long a best-effort log lets decisions gather
// before it commits them (or until 512 have): nobody waits for their
// commit, so one transaction keeps many.
const BestEffortLinger = 10 * time.Millisecond

// Options are the decision log's settings, as flags.
type Options struct {
	// Datastore is an SQLite file or a postgres:// URL; empty: no log.
	Datastore string
	// DatastoreURLFile holds the URL instead (a mounted Secret).
	DatastoreURLFile string
	// KeyFile holds the checkpoint key (callerauth decisions keygen):
	// its name is the log's origin.
	KeyFile string
	// Mode is ModeRequired or ModeBestEffort.
	Mode string
	// MaxAge and MaxEntries are the retention (translog.Retention).
	MaxAge     time.Duration
	MaxEntries int64
	// CallerMaxEntries is each caller's quota of entries within the
	// retention (the unauthenticated share one).
	CallerMaxEntries int64
	// Queue bounds the entries waiting for the store.
	Queue int
	// Sink ships committed decisions in OPA's decision-log format;
	// empty: none. SinkCAFile and SinkTokenFile are its TLS roots and
	// bearer token; SinkBuffer bounds what waits, SinkEvery how often it
	// is sent.
	Sink, SinkCAFile, SinkTokenFile string
	SinkBuffer                      int
	SinkEvery                       time.Duration
}

// NewOptions are the defaults: no log; when one is named, required,
// 30 days, 10 million entries, 1 million a caller.
func NewOptions() Options {
	return Options{Mode: ModeRequired, MaxAge: 30 * 24 * time.Hour, MaxEntries: 10_000_000, CallerMaxEntries: 1_000_000, Queue: 8192,
		SinkBuffer: 10_000, SinkEvery: 5 * time.Second}
}

// AddFlags registers the settings.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Datastore, "decision-log", o.Datastore, "keep every decision in a tamper-evident log in this datastore: an SQLite file, or a postgres:// URL that replicas share (docs/decision-log.md); empty: no log")
	f.StringVar(&o.DatastoreURLFile, "decision-log-url-file", o.DatastoreURLFile, "read --decision-log from this file (a mounted Secret: the URL may then carry the password without showing in the process's arguments)")
	f.StringVar(&o.KeyFile, "decision-log-key-file", o.KeyFile, "the key that signs the log's checkpoints, as `callerauth decisions keygen` writes it; its name is the log's origin. Required with --decision-log")
	f.StringVar(&o.Mode, "decision-log-mode", o.Mode, "required: an answer leaves only once its decision is in the log (else 503 decision_log_unavailable); best-effort: decisions are queued and what finds no room is dropped and counted")
	f.DurationVar(&o.MaxAge, "decision-log-max-age", o.MaxAge, "how long a decision is kept; older ones are pruned, 256 at a time (0: no age bound)")
	f.Int64Var(&o.MaxEntries, "decision-log-max-entries", o.MaxEntries, "the most decisions the log holds; past it the oldest are pruned, 256 at a time, even before --decision-log-max-age")
	f.Int64Var(&o.CallerMaxEntries, "decision-log-caller-max-entries", o.CallerMaxEntries, "the most decisions one caller may hold in the log; past it the caller's requests are refused 429 decision_log_quota_exceeded until older ones age out, so that its flood cannot push out other callers' history")
	f.IntVar(&o.Queue, "decision-log-queue", o.Queue, "decisions waiting for the store at most; past it a decision is refused (required) or dropped (best-effort)")
	f.StringVar(&o.Sink, "decision-log-sink", o.Sink, "also ship every decision the log commits to this URL in OPA's decision-log format (POSTs of gzip-compressed JSON arrays, as OPA's decision_logs service receives them): https://, or http:// to a loopback address without a token")
	f.StringVar(&o.SinkCAFile, "decision-log-sink-ca-file", o.SinkCAFile, "CA bundle (PEM) the sink's certificate is checked against (default: the system roots)")
	f.StringVar(&o.SinkTokenFile, "decision-log-sink-token-file", o.SinkTokenFile, "a bearer token for the sink, read again on every POST")
	f.IntVar(&o.SinkBuffer, "decision-log-sink-buffer", o.SinkBuffer, "decisions waiting to be shipped at most; past it they are dropped from the shipping (never from the log) and counted")
	f.DurationVar(&o.SinkEvery, "decision-log-sink-every", o.SinkEvery, "how often what waits is shipped (a full batch of 500 at once); a failed POST is retried with backoff up to a minute")
}

// On reports whether a log is asked for.
func (o Options) On() bool { return o.Datastore != "" || o.DatastoreURLFile != "" }

// Check refuses settings that cannot be honoured, naming the flag.
func (o Options) Check() error {
	if !o.On() {
		for _, c := range []struct {
			flag string
			set  bool
		}{{"decision-log-key-file", o.KeyFile != ""}, {"decision-log-sink", o.Sink != ""}} {
			if c.set {
				return fmt.Errorf("--%s belongs to --decision-log", c.flag)
			}
		}
		return nil
	}
	var errs []error
	if o.KeyFile == "" {
		errs = append(errs, errors.New("--decision-log needs --decision-log-key-file: the key that signs its checkpoints (callerauth decisions keygen writes one)"))
	}
	if o.Mode != ModeRequired && o.Mode != ModeBestEffort {
		errs = append(errs, fmt.Errorf("--decision-log-mode %q: want required or best-effort", o.Mode))
	}
	if o.MaxAge < 0 || o.MaxEntries < 0 {
		errs = append(errs, errors.New("--decision-log-max-age and --decision-log-max-entries: want 0 (no bound) or more"))
	}
	if o.CallerMaxEntries <= 0 {
		errs = append(errs, fmt.Errorf("--decision-log-caller-max-entries %d: want a positive number", o.CallerMaxEntries))
	}
	if o.Queue <= 0 {
		errs = append(errs, fmt.Errorf("--decision-log-queue %d: want a positive number", o.Queue))
	}
	if o.Sink != "" {
		if _, err := o.sinkCredentials(); err != nil {
			errs = append(errs, err)
		}
		if o.SinkBuffer <= 0 || o.SinkEvery <= 0 {
			errs = append(errs, errors.New("--decision-log-sink-buffer and --decision-log-sink-every: want positive values"))
		}
	} else if o.SinkCAFile != "" || o.SinkTokenFile != "" {
		errs = append(errs, errors.New("--decision-log-sink-ca-file and --decision-log-sink-token-file belong to --decision-log-sink"))
	}
	return errors.Join(errs...)
}

// sinkCredentials reads --decision-log-sink into the credentials
// package's configuration: https:// with TLS, or http:// to a loopback
// address, where no token may go.
func (o Options) sinkCredentials() (credentials.Config, error) {
	u, err := url.Parse(o.Sink)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return credentials.Config{}, fmt.Errorf("--decision-log-sink %q: want an https:// URL (or http:// to a loopback address)", o.Sink)
	}
	c := credentials.Config{Address: u.Host, TLS: u.Scheme == "https", CAFile: o.SinkCAFile, TokenFile: o.SinkTokenFile}
	if !c.TLS {
		host := u.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return credentials.Config{}, fmt.Errorf("--decision-log-sink %q: plain http:// only to a loopback address: the decisions name callers", o.Sink)
		}
		if o.SinkCAFile != "" || o.SinkTokenFile != "" {
			return credentials.Config{}, fmt.Errorf("--decision-log-sink %q: a CA file or a token needs https://", o.Sink)
		}
	}
	return c, c.Validate()
}

// Log is a service's open decision log.
type Log struct {
	o       Options
	service string
	log     *translog.Log
	db      *datastore.DB
	w       *translog.Writer
	logger  *slog.Logger

	mu     sync.Mutex
	counts map[string]int64 // live entries by caller, as last counted plus what this process added

	quotaRefused prometheus.Counter
	sink         *Sink
	started      atomic.Bool
}

// Open opens the datastore and the log for service (its name prefixes the
// metrics). nil, nil when o asks for no log.
func Open(ctx context.Context, service string, o Options, logger *slog.Logger) (*Log, error) {
	if !o.On() {
		return nil, nil
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	key, err := os.ReadFile(o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--decision-log-key-file: %w", err)
	}
	skey := strings.TrimSpace(string(key))
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("--decision-log-key-file %s: not a checkpoint key (callerauth decisions keygen writes one)", o.KeyFile)
	}
	target, err := datastore.Resolve(o.Datastore, o.DatastoreURLFile)
	if err != nil {
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	db, err := datastore.Open(ctx, "translog", target, translog.Migrations, datastore.Options{Logger: logger, SQLitePageSize: translog.SQLitePageSize})
	if err != nil {
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	tl, err := translog.Open(ctx, translog.Config{DB: db, Origin: signer.Name(), Key: skey})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	var sink *Sink
	var committed func(int64, []translog.Entry)
	if o.Sink != "" {
		cc, _ := o.sinkCredentials() // checked by Check
		rt, err := cc.Transport()
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("--decision-log-sink: %w", err)
		}
		u, _ := url.Parse(o.Sink)
		if sink, err = newSink(SinkConfig{URL: u, Client: &http.Client{Transport: rt, Timeout: 30 * time.Second}, Service: service,
			Buffer: o.SinkBuffer, MaxBatch: 500, Every: o.SinkEvery, MaxBackoff: time.Minute, Logger: logger, Metrics: service}, signer.Name()); err != nil {
			_ = db.Close()
			return nil, err
		}
		committed = sink.committed
	}
	var linger time.Duration
	if o.Mode == ModeBestEffort {
		linger = BestEffortLinger
	}
	w, err := translog.NewWriter(translog.WriterConfig{Log: tl, MaxQueue: o.Queue, Linger: linger, Logger: logger, Metrics: service,
		Retention: translog.Retention{MaxAge: o.MaxAge, MaxEntries: o.MaxEntries}, Committed: committed})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	l := &Log{o: o, service: service, log: tl, db: db, w: w, logger: logger, sink: sink,
		quotaRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: service + "_decision_log_quota_refusals_total", Help: "Decisions refused (or, for refusals, not kept) because the caller held --decision-log-caller-max-entries entries."})}
	if err := l.recount(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("--decision-log: %w", err)
	}
	return l, nil
}

// Close closes the datastore; Start must have returned.
func (l *Log) Close() error { return l.db.Close() }

// Translog is the underlying log.
func (l *Log) Translog() *translog.Log { return l.log }

// Collectors are the log's metrics.
func (l *Log) Collectors() []prometheus.Collector {
	cs := append(l.w.Collectors(), l.quotaRefused)
	if l.sink != nil {
		cs = append(cs, l.sink.Collectors()...)
	}
	return cs
}

// Ready reports whether the writer runs and its last transaction
// committed.
func (l *Log) Ready() bool { return l.w.Ready() }

// Check is the log's readiness: its writer runs and its datastore
// answers. (A failed transaction alone does not make it unready: the next
// may commit, and an unready pdp would get none to try.)
func (l *Log) Check(ctx context.Context) error {
	if !l.started.Load() {
		return errors.New("the decision log's writer is not running")
	}
	if err := l.db.PingContext(ctx); err != nil {
		return fmt.Errorf("the decision log's datastore: %w", err)
	}
	return nil
}

// String names the runnable.
func (l *Log) String() string { return "decision log" }

// Start runs the writer (group commits, checkpoints, pruning) and counts
// each caller's entries again after every prune, until ctx ends.
func (l *Log) Start(ctx context.Context) error {
	l.started.Store(true)
	defer l.started.Store(false)
	done := make(chan error, 1)
	go func() { done <- l.w.Start(ctx) }()
	if l.sink != nil {
		// The sink ships what the writer committed, the last of it once
		// the writer has drained.
		sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
		sunk := make(chan struct{})
		go func() { _ = l.sink.Start(sinkCtx); close(sunk) }()
		defer func() { stopSink(); <-sunk }()
	}
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			if err := l.recount(ctx); err != nil && l.logger != nil && ctx.Err() == nil {
				l.logger.Warn("decision log: counting callers' entries failed; the last counts stand", "err", err)
			}
		}
	}
}

func (l *Log) recount(ctx context.Context) error {
	counts, err := l.log.CountByCaller(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
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
	if n >= l.o.CallerMaxEntries {
		l.quotaRefused.Inc()
		return l.overShare(caller)
	}
	return nil
}

func (l *Log) overShare(caller string) error {
	return fmt.Errorf("%q holds %d decisions in the log", caller, l.o.CallerMaxEntries)
}

// admit takes one entry of caller's quota, or reports it spent.
func (l *Log) admit(caller string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts[caller] >= l.o.CallerMaxEntries {
		return false
	}
	l.counts[caller]++
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

func (l *Log) entry(d Decision) (translog.Entry, error) {
	e := entry{V: 1, Service: l.service, At: d.At.UTC().Format(time.RFC3339Nano), Caller: d.Caller, System: d.System,
		Tenant: d.Tenant, Allowed: d.Allowed, Reason: d.Reason, Method: d.Method, Path: d.Path, Status: d.Status}
	if len(e.Path) > MaxPathBytes {
		e.Path, e.PathBytes = strings.ToValidUTF8(e.Path[:MaxPathBytes], ""), len(d.Path)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return translog.Entry{}, err
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
				return translog.Entry{}, err
			}
		}
	}
	if len(b) > translog.MaxEntryBytes {
		return translog.Entry{}, fmt.Errorf("a decision of %d bytes without its answer: over the log's %d", len(b), translog.MaxEntryBytes)
	}
	return translog.Entry{Data: b, At: d.At, Caller: d.Caller, System: d.System, Tenant: d.Tenant, Reason: d.Reason, Allowed: d.Allowed}, nil
}

// Keep logs an answer before it is given. Required: it returns once the
// decision is committed, or the refusal to answer (ReasonUnavailable,
// ReasonQuotaExceeded); best-effort: once queued, never refusing for
// want of room. The zero reason: answer.
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
// commit when the writer's batch has room (a group of answers signed
// together, kept together).
func (l *Log) KeepAll(ctx context.Context, ds []Decision) []Kept {
	out := make([]Kept, len(ds))
	var es []translog.Entry
	var at []int // es[j] is ds[at[j]]
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
		if l.o.Mode == ModeBestEffort {
			l.w.Offer(e)
			continue
		}
		es, at = append(es, e), append(at, i)
	}
	if len(es) == 0 {
		return out
	}
	_, errs := l.w.AppendAll(ctx, es)
	for j, err := range errs {
		if err != nil {
			out[at[j]] = Kept{ReasonUnavailable, err}
		}
	}
	return out
}

// Required reports whether every answer waits for its decision's commit
// (--decision-log-mode required).
func (l *Log) Required() bool { return l.o.Mode == ModeRequired }

// Refused logs a refusal as the log has room and the caller quota: a
// refusal is never held up, nor changed, by its log.
func (l *Log) Refused(d Decision) {
	if !l.admit(d.Caller) {
		l.quotaRefused.Inc()
		return
	}
	if e, err := l.entry(d); err == nil {
		l.w.Offer(e)
	}
}

// Sign signs a checkpoint of the log as it stands now (the writer signs
// one every second while the log grows).
func (l *Log) Sign(ctx context.Context) (translog.Checkpoint, error) { return l.log.Sign(ctx) }

// Prune applies the retention now (the writer does every minute) and
// returns the log's minimum index.
func (l *Log) Prune(ctx context.Context) (int64, error) {
	return l.log.Prune(ctx, translog.Retention{MaxAge: l.o.MaxAge, MaxEntries: l.o.MaxEntries})
}
