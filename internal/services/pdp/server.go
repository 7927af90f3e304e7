// Package pdp is the policy decision point (docs/pdp.md): POST /v1/check
// with caller authentication, Cedar policies, and signed decision records
// that name the caller.
package pdp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/watched"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
)

// RecordProfile is the format of the PDP's decision records: the flex-auth
// decision record v2 (v1 plus the caller block), typed for JWS so that no
// other JWT can be taken for one.
var RecordProfile = decision.Profile{Schema: "flex-auth.decision-record.v2", Type: "flex-auth-decision+jwt"}

// PathJWKS publishes the keys that sign decision records, AuthZEN answers
// and the AuthZEN metadata.
const PathJWKS = "/.well-known/jwks.json"

// MaxBody is the largest check request accepted.
const MaxBody = 64 << 10

// Group-commit signing of /v1/check records: the default and the most one
// signature may cover.
const (
	DefaultSignGroup = 64
	MaxSignGroup     = 1024
)

// AuthZEN's limits: the defaults and the largest values the flags take.
const (
	DefaultAuthZENMaxBody      = 1 << 20
	MaxAuthZENBody             = 16 << 20
	DefaultSearchPageSize      = 100
	MaxSearchPageSize          = 1000
	DefaultSearchMaxCandidates = 10000
	MaxSearchCandidates        = 1000000
)

// Server is a running PDP.
type Server struct {
	c     Config
	m     *serve.Manager
	port  atomic.Int32 // the API's TCP port, once Run listens
	log   *slog.Logger
	guard *guard.Guard
	// state is the policy package, registry and keys in force, followed
	// on disk (a new version on change or SIGHUP; one that fails to load
	// leaves the last good one serving).
	state   *watched.Value[*state]
	health  *serve.Health
	checks  *prometheus.CounterVec
	latency prometheus.Histogram
	reloads *prometheus.CounterVec
	// signFailures counts answers refused because signing failed.
	signFailures prometheus.Counter
	// AuthZEN: evaluations by decision and reason, request latency by
	// endpoint.
	evaluations     *prometheus.CounterVec
	searchEvaluated *prometheus.CounterVec
	groupSize       prometheus.Histogram
	evalGroupSize   prometheus.Histogram
	azLatency       *prometheus.HistogramVec
	// dlog is the decision log (--decision-log); nil: none.
	dlog *decisionlog.Log
	// dlogAPI is its read API (decisionlog.Log.API); nil: not served.
	dlogAPI http.Handler
	now     func() time.Time
}

// New loads and validates the policy package and the registry, the
// signing keys and the serving key pair, and builds the caller
// authentication, as c says.
func New(c Config) (*Server, error) {
	m, err := serve.New("pdp", c.Serve, c.Logger)
	if err != nil {
		return nil, fmt.Errorf("pdp: %w", err)
	}
	m.Health().Registry.MustRegister(serve.BuildInfo("pdp"))
	s := &Server{c: c, m: m, log: m.Logger(), health: m.Health(), now: time.Now}
	s.groupSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdp_signing_group_records", Help: "Records /v1/check signed under one signature (group-commit signing; 1 when the pdp is idle).", Buckets: prometheus.ExponentialBuckets(1, 2, 8)})
	s.evalGroupSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdp_authzen_signing_group_records", Help: "Records of single AuthZEN evaluations signed under one signature (group-commit signing; 1 when the pdp is idle).", Buckets: prometheus.ExponentialBuckets(1, 2, 8)})
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdp_reloads_total", Help: "Reloads of the policy package, registry and signing keys, by result (a failed one keeps the previous version serving)."}, []string{"result"})
	if s.state, err = watched.New(watched.Config[*state]{
		What:     "pdp: the policy, registry and signing keys",
		Paths:    []string{c.PolicyDir, c.Registry, c.SigningKeyFile},
		Load:     s.load,
		Interval: c.ReloadInterval,
		Logger:   s.log,
		Result: func(err error) {
			s.reloads.WithLabelValues(map[bool]string{true: "success", false: "failure"}[err == nil]).Inc()
		},
		Describe: func(st *state) []any {
			return []any{"package", st.pkg.ID, "policy_version", st.pkg.Version, "digest", st.pkg.Digest, "signing_kid", st.signer.KeyID(), "published_kids", kids(st.signer)}
		},
	}); err != nil {
		return nil, err
	}
	reg := s.health.Registry
	s.checks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdp_checks_total", Help: "Checks answered, by effect and reason."}, []string{"effect", "reason"})
	s.latency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdp_check_duration_seconds", Help: "Time to answer a check, authentication, evaluation and signing included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	s.reloads.WithLabelValues("success")
	s.reloads.WithLabelValues("failure")
	s.evaluations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdp_authzen_evaluations_total", Help: "AuthZEN evaluations answered, by decision and reason."}, []string{"decision", "reason"})
	s.azLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pdp_authzen_request_duration_seconds", Help: "Time to answer an AuthZEN request (one evaluation or a batch), authentication, evaluation and signing included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"endpoint"})
	s.searchEvaluated = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdp_authzen_search_candidates_total", Help: "Candidates AuthZEN searches evaluated, by endpoint."}, []string{"endpoint"})
	s.signFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "pdp_signing_failures_total", Help: "Answers refused with 500 signing_failed because the record could not be signed."})
	reg.MustRegister(s.checks, s.latency, s.reloads, s.evaluations, s.azLatency, s.searchEvaluated, s.signFailures, s.groupSize, s.evalGroupSize)
	for _, w := range c.Warnings {
		s.log.Warn("pdp: " + w)
	}
	if c.Callers.Off() {
		s.log.Warn("pdp: --caller-auth-mode off: callers are NOT authenticated; anyone who reaches the PDP obtains decisions, and records say authenticated: false")
	}
	s.guard, err = m.Guard(c.Callers, callers.Service{Name: "pdp", Rule: binding.SystemBinding(c.Bindings)})
	if err != nil {
		return nil, fmt.Errorf("pdp: caller authentication: %w", err)
	}
	if s.dlog, err = decisionlog.Attach(m, "pdp", c.DecisionLog); err != nil || s.dlog == nil {
		if err != nil {
			return nil, fmt.Errorf("pdp: %w", err)
		}
		return s, nil
	}
	if c.Callers.Off() {
		s.log.Warn("pdp: --decision-log is kept, but its read API is not served: callers are not authenticated")
	}
	if s.dlogAPI, err = s.dlog.API(m, c.Bindings[decisionlog.ReaderSystem]); err != nil {
		return nil, fmt.Errorf("pdp: %w", err)
	}
	return s, nil
}

// Registry returns the metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.health.Registry }

// Handler serves the PDP's API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", s.checkHandler())
	for _, p := range []string{PathEvaluation, PathEvaluations, PathSearchSubject, PathSearchResource, PathSearchAction} {
		var h http.Handler
		if _, ok := searchKinds[p]; ok {
			h = s.searchHandler(p)
		} else {
			h = s.authzenHandler(p)
		}
		mux.Handle("POST "+p, h)
		mux.Handle("POST /{tenant}"+p, s.inTenant(h))
	}
	mux.Handle("GET "+PathAuthZENConfig, http.HandlerFunc(s.authzenConfig))
	mux.Handle("GET "+PathAuthZENConfig+"/{tenant}", http.HandlerFunc(s.authzenConfig))
	mux.HandleFunc("GET "+PathJWKS, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_ = json.NewEncoder(w).Encode(s.state.Get().signer.JWKS())
	})
	if s.dlogAPI != nil {
		// The manager's read API of the log: the principal bound to
		// ReaderSystem alone, always enforced.
		mux.Handle("GET "+decisionlog.PathSearch, s.dlogAPI)
		mux.Handle("GET "+decisionlog.PathEntry, s.dlogAPI)
	}
	mux.HandleFunc("GET /healthz", s.health.Healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := s.state.Get()
		_, _ = fmt.Fprintf(w, "ok %s %s\n", st.pkg.ID, st.pkg.Version)
	})
	// Every answer the mux gives echoes the request's X-Request-ID: a
	// decision, a refusal, a bad request, and the mux's own 404 (an
	// unknown path or tenant) and 405, the metadata and the JWKS alike.
	return echoRequestID(mux)
}

// Run serves until ctx ends, through the service skeleton: the API (HTTPS
// with the key pair reloaded on change, or plain HTTP on loopback), the
// metrics listener, and the reload loop. SIGHUP, or a change to the policy,
// registry or signing key files (polled), reloads them. A listener that cannot
// be opened, or dies, is an error.
func (s *Server) Run(ctx context.Context) error {
	lis, err := serve.ListenTCP("--listen", s.c.Serve.Listen)
	if err != nil {
		return fmt.Errorf("pdp: %w", err)
	}
	cfg := s.m.TLSConfig()
	if cfg != nil {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	if a, ok := lis.Addr().(*net.TCPAddr); ok {
		s.port.Store(int32(a.Port)) //nolint:gosec // a TCP port fits.
	}
	s.m.ServeHTTP("api", lis, cfg, s.Handler())
	s.m.Add(serve.Named("policy reload", serve.RunnableFunc(s.reloadLoop)))
	st := s.state.Get()
	s.m.Set("address", lis.Addr().String(),
		"package", st.pkg.ID, "policy_version", st.pkg.Version, "signing_kid", st.signer.KeyID(), "published_kids", kids(st.signer))
	if err := s.m.Run(ctx); err != nil {
		_ = lis.Close()
		return fmt.Errorf("pdp: %w", err)
	}
	return nil
}

// DecisionLog is the decision log (--decision-log), nil when none: Run
// starts it; a test that serves Handler alone starts it itself.
func (s *Server) DecisionLog() *decisionlog.Log { return s.dlog }
