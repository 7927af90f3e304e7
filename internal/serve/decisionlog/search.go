package decisionlog

// The search index: a follower of the log. It reads what the log kept,
// off the decisions' path, and writes it in large transactions; it can
// be dropped at any time and is built again from the log.

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/translog"
)

//go:embed migrations
var migrations embed.FS

// Migrations are the search index's tables, one set per dialect.
var Migrations = func() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err)
	}
	return sub
}()

// The follower's bounds.
const (
	// indexBatch bounds the entries one transaction writes.
	indexBatch = 4096
	// indexGather is how long the follower lets entries gather before a
	// transaction of fewer than indexBatch.
	indexGather = 100 * time.Millisecond
	// rowsAStatement: entries one INSERT writes.
	rowsAStatement = 64
)

// search is the index of one log in a datastore that may hold others'.
type search struct {
	db *datastore.DB
	// withData: the index holds each entry's bytes (PostgreSQL, which
	// replicas share); an SQLite index, one process's, reads them from
	// its log.
	withData bool
	log      *translog.Log
	origin   string
	logger   *slog.Logger

	mu       sync.Mutex
	next     int64         // the log's next index to index
	progress chan struct{} // closed and replaced as next moves

	indexed, lag prometheus.Gauge
	failures     prometheus.Counter
	failing      atomic.Bool // the last transaction failed
}

func openSearch(ctx context.Context, target string, log *translog.Log, prefix string, logger *slog.Logger) (*search, error) {
	db, err := datastore.Open(ctx, "decision-search", target, Migrations, datastore.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	s := &search{db: db, withData: db.Dialect == datastore.Postgres, log: log, origin: log.Origin(), logger: logger, progress: make(chan struct{}),
		indexed:  prometheus.NewGauge(prometheus.GaugeOpts{Name: prefix + "_search_next_index", Help: "The next index of the log the search index will hold: it holds the decisions below it."}),
		lag:      prometheus.NewGauge(prometheus.GaugeOpts{Name: prefix + "_search_lag_entries", Help: "Decisions the log holds that the search index does not hold yet."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + "_search_failures_total", Help: "Transactions of the search index that failed (retried)."}),
	}
	if err := s.start(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func (s *search) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.indexed, s.lag, s.failures}
}

// start reads how far the index holds the log. An index ahead of the
// log (a log started again in an empty directory) is of another log: its
// rows go and it is built again.
func (s *search) start(ctx context.Context) error {
	var next int64
	err := s.db.QueryRowContext(ctx, s.db.Rebind("SELECT next FROM decision_search_logs WHERE origin = ?"), s.origin).Scan(&next)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	size, minIdx := s.log.Size(), s.log.MinIndex()
	if next > size {
		if s.logger != nil {
			s.logger.Warn("decision log: the search index holds more of the log than the log does: building it again", "origin", s.origin, "indexed", next, "log", size)
		}
		if _, err := s.db.ExecContext(ctx, s.db.Rebind("DELETE FROM decision_search WHERE origin = ?"), s.origin); err != nil {
			return err
		}
		next = 0
	}
	s.next = max(next, minIdx)
	s.indexed.Set(float64(s.next))
	return nil
}

// run indexes what the log kept until ctx ends.
func (s *search) run(ctx context.Context) {
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	backoff := time.Second
	for {
		s.mu.Lock()
		next := s.next
		s.mu.Unlock()
		size := s.log.Size()
		s.lag.Set(float64(size - next))
		if next < size {
			if size-next < indexBatch {
				// Let a larger transaction gather.
				select {
				case <-ctx.Done():
				case <-time.After(indexGather):
				}
			}
			err := s.index(ctx, next)
			s.failing.Store(err != nil)
			if err != nil {
				s.failures.Inc()
				if s.logger != nil && ctx.Err() == nil {
					s.logger.Error("decision log: indexing failed; retrying", "err", err, "in", backoff)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Minute)
				continue
			}
			backoff = time.Second
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.log.Grown(next):
		case <-prune.C:
			if err := s.prune(ctx); err != nil && s.logger != nil && ctx.Err() == nil {
				s.logger.Warn("decision log: pruning the search index failed", "err", err)
			}
		}
	}
}

// index writes the log's entries from next on, up to indexBatch, in one
// transaction.
func (s *search) index(ctx context.Context, next int64) error {
	if minIdx := s.log.MinIndex(); next < minIdx {
		next = minIdx // pruned before it was indexed
	}
	es, err := s.log.Entries(next, indexBatch)
	if err != nil {
		return err
	}
	if len(es) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	const cols = "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
	for start := 0; start < len(es); start += rowsAStatement {
		part := es[start:min(len(es), start+rowsAStatement)]
		args := make([]any, 0, 9*len(part))
		for i, e := range part {
			c, err := columnsOf(e)
			if err != nil {
				return fmt.Errorf("entry %d of %s: %w", next+int64(start+i), s.origin, err)
			}
			var data []byte
			if s.withData {
				data = e
			}
			args = append(args, s.origin, next+int64(start+i), c.at, c.Caller, c.System, c.Tenant, c.Reason, c.allowed(), data)
		}
		q := "INSERT INTO decision_search (origin, idx, at, caller, system, tenant, reason, allowed, data) VALUES " +
			cols + strings.Repeat(", "+cols, len(part)-1) + " ON CONFLICT (origin, idx) DO NOTHING"
		if _, err := tx.ExecContext(ctx, s.db.Rebind(q), args...); err != nil {
			return err
		}
	}
	end := next + int64(len(es))
	if _, err := tx.ExecContext(ctx, s.db.Rebind("INSERT INTO decision_search_logs (origin, next) VALUES (?, ?) ON CONFLICT (origin) DO UPDATE SET next = excluded.next"), s.origin, end); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.mu.Lock()
	s.next = end
	ch := s.progress
	s.progress = make(chan struct{})
	s.mu.Unlock()
	close(ch)
	s.indexed.Set(float64(end))
	return nil
}

// prune deletes the rows of entries the log pruned.
func (s *search) prune(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.db.Rebind("DELETE FROM decision_search WHERE origin = ? AND idx < ?"), s.origin, s.log.MinIndex())
	return err
}

// caughtUp waits until the index holds the log's entries below size.
func (s *search) caughtUp(ctx context.Context, size int64) error {
	for {
		s.mu.Lock()
		next, ch := s.next, s.progress
		s.mu.Unlock()
		if next >= size {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("the search index holds %d of %d: %w", next, size, ctx.Err())
		}
	}
}

// drain waits, up to d, for the index to hold what the log holds; not
// while its transactions fail.
func (s *search) drain(d time.Duration) {
	size := s.log.Size()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		s.mu.Lock()
		next, ch := s.next, s.progress
		s.mu.Unlock()
		if next >= size || s.failing.Load() {
			return
		}
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if s.logger != nil {
		s.logger.Warn("decision log: stopping before the search index held the whole log; it catches up at the next start", "indexed", s.position(), "log", size)
	}
}

// position is how far the index holds this log.
func (s *search) position() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// countByCaller is how many of this log's entries each caller holds.
func (s *search) countByCaller(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.db.Rebind("SELECT caller, COUNT(*) FROM decision_search WHERE origin = ? GROUP BY caller"), s.origin)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	counts := map[string]int64{}
	for rows.Next() {
		var caller string
		var n int64
		if err := rows.Scan(&caller, &n); err != nil {
			return nil, err
		}
		counts[caller] = n
	}
	return counts, rows.Err()
}

// Query selects decisions: each set field must match; After is a cursor
// (Found.Seq of the last one read; 0 for from the start).
type Query struct {
	Origin, Caller, System, Tenant, Reason string
	Allowed                                *bool
	Since, Until                           time.Time
	After                                  int64
	// Limit bounds the decisions returned: 1 to MaxSearch.
	Limit int
}

// MaxSearch bounds a search's page.
const MaxSearch = 1000

// Found is a decision a search found.
type Found struct {
	Seq    int64
	Origin string
	Index  int64
	Data   []byte
}

// find returns the decisions q selects, in the order they were indexed;
// an entry the index does not hold is read from this log (one pruned
// meanwhile is left out).
func (s *search) find(ctx context.Context, q Query) ([]Found, error) {
	if q.Limit <= 0 || q.Limit > MaxSearch {
		return nil, fmt.Errorf("a search page of %d: want 1 to %d", q.Limit, MaxSearch)
	}
	where := []string{"seq > ?"}
	args := []any{q.After}
	for _, c := range []struct{ col, v string }{{"origin", q.Origin}, {"caller", q.Caller}, {"system", q.System}, {"tenant", q.Tenant}, {"reason", q.Reason}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if q.Allowed != nil {
		allowed := 0
		if *q.Allowed {
			allowed = 1
		}
		where = append(where, "allowed = ?")
		args = append(args, allowed)
	}
	if !q.Since.IsZero() {
		where = append(where, "at >= ?")
		args = append(args, q.Since.UnixMilli())
	}
	if !q.Until.IsZero() {
		where = append(where, "at < ?")
		args = append(args, q.Until.UnixMilli())
	}
	args = append(args, q.Limit)
	rows, err := s.db.QueryContext(ctx, s.db.Rebind("SELECT seq, origin, idx, data FROM decision_search WHERE "+strings.Join(where, " AND ")+" ORDER BY seq LIMIT ?"), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []Found
	for rows.Next() {
		var f Found
		if err := rows.Scan(&f.Seq, &f.Origin, &f.Index, &f.Data); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	kept := out[:0]
	for _, f := range out {
		if f.Data == nil {
			data, err := s.log.Entry(f.Index)
			if errors.Is(err, translog.ErrNotHeld) || f.Origin != s.origin {
				continue
			}
			if err != nil {
				return nil, err
			}
			f.Data = data
		}
		kept = append(kept, f)
	}
	return kept, nil
}

// columns are what a search asks of an entry: its members before the
// answer (an entry's answer comes last, so that reading them leaves the
// answer unread).
type columns struct {
	At      string `json:"at"`
	Caller  string `json:"caller"`
	System  string `json:"system"`
	Tenant  string `json:"tenant"`
	Reason  string `json:"reason"`
	Allowed bool   `json:"allowed"`
	at      int64
}

func (c columns) allowed() int {
	if c.Allowed {
		return 1
	}
	return 0
}

func columnsOf(e []byte) (columns, error) {
	var c columns
	err := eachMember(e, func(key string, value []byte) (bool, error) {
		var dst *string
		switch key {
		case "answer":
			return false, nil // the rest is the answer
		case "at":
			dst = &c.At
		case "caller":
			dst = &c.Caller
		case "system":
			dst = &c.System
		case "tenant":
			dst = &c.Tenant
		case "reason":
			dst = &c.Reason
		case "allowed":
			c.Allowed = string(value) == "true"
			return true, nil
		default:
			return true, nil
		}
		s, err := jsonString(value)
		*dst = s
		return true, err
	})
	if err != nil {
		return c, fmt.Errorf("not a decision: %w", err)
	}
	at, err := time.Parse(time.RFC3339Nano, c.At)
	if err != nil {
		return c, fmt.Errorf("not a decision: at %q", c.At)
	}
	c.at = at.UnixMilli()
	return c, nil
}

// eachMember gives f each member of the JSON object e whose value is a
// string, a number, true, false or null (an entry's members before its
// answer are), in order, until f says stop; a member of another kind
// ends the walk with an error.
func eachMember(e []byte, f func(key string, value []byte) (bool, error)) error {
	i := 0
	skip := func() {
		for i < len(e) && (e[i] == ' ' || e[i] == '\t' || e[i] == '\n' || e[i] == '\r') {
			i++
		}
	}
	str := func() ([]byte, error) { // e[i] is a quote; through the closing one
		start := i
		for i++; i < len(e); i++ {
			switch e[i] {
			case '\\':
				i++
			case '"':
				i++
				return e[start:i], nil
			}
		}
		return nil, errors.New("a string cut short")
	}
	skip()
	if i >= len(e) || e[i] != '{' {
		return errors.New("not an object")
	}
	i++
	for {
		skip()
		if i < len(e) && e[i] == '}' {
			return nil
		}
		if i >= len(e) || e[i] != '"' {
			return errors.New("a member without a name")
		}
		k, err := str()
		if err != nil {
			return err
		}
		skip()
		if i >= len(e) || e[i] != ':' {
			return errors.New("a member without a value")
		}
		i++
		skip()
		var v []byte
		switch {
		case i < len(e) && e[i] == '"':
			if v, err = str(); err != nil {
				return err
			}
		case i < len(e) && e[i] != '{' && e[i] != '[':
			start := i
			for i < len(e) && e[i] != ',' && e[i] != '}' && e[i] != ' ' {
				i++
			}
			v = e[start:i]
		default:
			if key := string(k[1 : len(k)-1]); key == "answer" {
				_, err := f(key, nil)
				return err
			}
			return fmt.Errorf("member %s is not a string, a number or a literal", k)
		}
		more, err := f(string(k[1:len(k)-1]), v)
		if err != nil || !more {
			return err
		}
		skip()
		if i < len(e) && e[i] == ',' {
			i++
		}
	}
}

// jsonString decodes a JSON string token.
func jsonString(v []byte) (string, error) {
	if len(v) < 2 || v[0] != '"' {
		return "", fmt.Errorf("%.40q is not a string", v)
	}
	if !bytes.ContainsRune(v, '\\') {
		return string(v[1 : len(v)-1]), nil
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}
