package decisionlog

// Shipping committed decisions to an HTTP sink in OPA's decision-log
// format, so that what already reads OPA's logs reads these unchanged.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/foundation/version"
)

// SinkConfig is where and how decisions are shipped.
type SinkConfig struct {
	// URL receives POSTs of gzip-compressed JSON arrays of events, as
	// OPA's decision-log service API does (OPA's default resource is
	// /logs: name it in the URL).
	URL *url.URL
	// Client sends them (TLS and a bearer token, the credentials
	// package's transport).
	Client *http.Client
	// Service names the labels' app (callerauth-pdp).
	Service string
	// Buffer bounds the events waiting to be shipped; past it new ones
	// are dropped and counted.
	Buffer int
	// MaxBatch bounds the events of one POST.
	MaxBatch int
	// Every is how often what waits is shipped.
	Every time.Duration
	// MaxBackoff bounds the wait between retries of a failed POST.
	MaxBackoff time.Duration
	Logger     *slog.Logger
	// Metrics prefixes the metric names (the service's).
	Metrics string
}

// Sink ships the decisions the log keeps, following it, in OPA's
// format. Run it with Start.
type Sink struct {
	cfg    SinkConfig
	log    *translog.Log
	origin string
	labels map[string]string
	next   int64 // the log's next index to queue

	mu    sync.Mutex
	queue []opaEvent

	shipped, dropped, rejected, retries prometheus.Counter
}

// opaEvent is one decision as OPA's decision-log events are written
// (labels, decision_id, path, input, result, timestamp, custom).
type opaEvent struct {
	Labels     map[string]string `json:"labels"`
	DecisionID string            `json:"decision_id"`
	Path       string            `json:"path"`
	Input      map[string]any    `json:"input"`
	Result     map[string]any    `json:"result"`
	Timestamp  string            `json:"timestamp"`
	Custom     map[string]any    `json:"custom"`
}

func newSink(cfg SinkConfig, log *translog.Log) (*Sink, error) {
	origin := log.Origin()
	if cfg.URL == nil || cfg.Client == nil {
		return nil, errors.New("decision log sink: no URL or client")
	}
	if cfg.Buffer <= 0 || cfg.MaxBatch <= 0 || cfg.Every <= 0 || cfg.MaxBackoff <= 0 {
		return nil, fmt.Errorf("decision log sink: buffer %d, batch %d, every %s, backoff %s: want positive bounds", cfg.Buffer, cfg.MaxBatch, cfg.Every, cfg.MaxBackoff)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	name := func(n string) string { return cfg.Metrics + "_decision_log_sink_" + n }
	return &Sink{cfg: cfg, log: log, origin: origin, next: log.Size(),
		labels:   map[string]string{"app": "callerauth-" + cfg.Service, "id": hex.EncodeToString(id), "version": version.Get().Version},
		shipped:  prometheus.NewCounter(prometheus.CounterOpts{Name: name("shipped_total"), Help: "Decisions the sink accepted."}),
		dropped:  prometheus.NewCounter(prometheus.CounterOpts{Name: name("dropped_total"), Help: "Decisions not shipped because the sink's buffer was full (they stay in the log)."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: name("rejected_total"), Help: "Decisions in batches the sink refused with a 4xx other than 408 and 429: not retried (they stay in the log)."}),
		retries:  prometheus.NewCounter(prometheus.CounterOpts{Name: name("retries_total"), Help: "POSTs sent again after a failure, with backoff."}),
	}, nil
}

// Collectors are the sink's metrics.
func (s *Sink) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.shipped, s.dropped, s.rejected, s.retries}
}

// follow queues what the log kept since the last call, as the buffer
// has room; what finds none is counted and left out of the shipping.
func (s *Sink) follow() {
	size := s.log.Size()
	if minIdx := s.log.MinIndex(); s.next < minIdx {
		s.dropped.Add(float64(minIdx - s.next))
		s.next = minIdx
	}
	for s.next < size {
		es, err := s.log.Entries(s.next, s.cfg.MaxBatch)
		if err != nil || len(es) == 0 {
			if err != nil && s.cfg.Logger != nil {
				s.cfg.Logger.Error("decision log sink: reading the log failed", "err", err)
			}
			return
		}
		s.mu.Lock()
		for i, e := range es {
			if len(s.queue) >= s.cfg.Buffer {
				s.dropped.Inc()
				continue
			}
			s.queue = append(s.queue, s.event(s.next+int64(i), e))
		}
		s.mu.Unlock()
		s.next += int64(len(es))
	}
}

// event is an entry as OPA writes an event: the verified facts as input,
// the decision and the answer given as result, the log's origin and
// index (for a proof) as custom.
func (s *Sink) event(index int64, data []byte) opaEvent {
	var stored struct {
		At      string          `json:"at"`
		Caller  string          `json:"caller"`
		System  string          `json:"system"`
		Tenant  string          `json:"tenant"`
		Allowed bool            `json:"allowed"`
		Reason  string          `json:"reason"`
		Path    string          `json:"path"`
		Status  int             `json:"status"`
		Answer  json.RawMessage `json:"answer"`
		Digest  string          `json:"answer_digest"`
	}
	_ = json.Unmarshal(data, &stored)
	result := map[string]any{"allowed": stored.Allowed, "reason": stored.Reason, "status": stored.Status}
	if stored.Answer != nil {
		result["answer"] = stored.Answer
	}
	if stored.Digest != "" {
		result["answer_digest"] = stored.Digest
	}
	return opaEvent{Labels: s.labels, DecisionID: fmt.Sprintf("%s/%d", s.origin, index), Path: "callerauth/" + s.cfg.Service + stored.Path,
		Input:     map[string]any{"caller": stored.Caller, "system": stored.System, "tenant": stored.Tenant, "path": stored.Path},
		Result:    result,
		Timestamp: stored.At,
		Custom:    map[string]any{"log_origin": s.origin, "log_index": index}}
}

// Start ships what waits every Every (or as soon as a batch is full)
// until ctx ends, then once more within 5 s.
func (s *Sink) Start(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.follow()
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			for s.ship(last) {
			}
			cancel()
			return nil
		case <-t.C:
			s.follow()
		case <-s.log.Grown(s.next + int64(s.cfg.MaxBatch) - 1):
			s.follow() // a full batch waits
		}
		for s.ship(ctx) {
		}
	}
}

// ship POSTs one batch, retrying with backoff until the sink takes it,
// refuses it, or ctx ends; it reports whether more waits.
func (s *Sink) ship(ctx context.Context) bool {
	s.mu.Lock()
	n := min(len(s.queue), s.cfg.MaxBatch)
	batch := append([]opaEvent(nil), s.queue[:n]...)
	s.mu.Unlock()
	if n == 0 {
		return false
	}
	var body bytes.Buffer
	z := gzip.NewWriter(&body)
	if err := json.NewEncoder(z).Encode(batch); err != nil {
		return false
	}
	_ = z.Close()
	backoff := 100 * time.Millisecond
	for {
		status, err := s.post(ctx, body.Bytes())
		switch {
		case err == nil && status/100 == 2:
			s.shipped.Add(float64(n))
			s.take(n)
			return true
		case err == nil && status/100 == 4 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout:
			s.rejected.Add(float64(n))
			if s.cfg.Logger != nil {
				s.cfg.Logger.Error("decision log sink: the sink refused a batch; it is not sent again", "status", status, "events", n)
			}
			s.take(n)
			return true
		}
		if s.cfg.Logger != nil {
			s.cfg.Logger.Warn("decision log sink: a POST failed; retrying", "status", status, "err", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		s.retries.Inc()
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

func (s *Sink) take(n int) {
	s.mu.Lock()
	s.queue = append(s.queue[:0], s.queue[n:]...)
	s.mu.Unlock()
}

func (s *Sink) post(ctx context.Context, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL.String(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
