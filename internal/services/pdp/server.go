// Package pdp is the policy decision point (docs/pdp.md): POST /v1/check
// with caller authentication, Cedar policies, and signed decision records
// that name the caller.
package pdp

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/version"
	"github.com/callerauth/callerauth/internal/foundation/watched"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

// Caller authentication modes.
const (
	ModeEnforce = "enforce"
	ModeWarn    = "warn"
	ModeOff     = "off"
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

// Options are the PDP's flags.
type Options struct {
	// Serve: --listen, --tls-cert-file, --tls-key-file, --metrics-listen,
	// --log-level, --shutdown-timeout and the --http-* limits.
	Serve serve.Options
	// Auth: --caller-backend, --kubeconfig, --caller-oidc-issuers,
	// --caller-cache-ttl, --caller-review-timeout.
	Auth           serve.AuthOptions
	InsecureHTTP   bool
	PolicyDir      string
	Registry       string
	CallerAuthMode string
	AllowAuthOff   bool
	CallerAudience string
	CallerBindings []string
	SigningKeyFile string
	ReloadInterval time.Duration
	// AuthZENBaseURL is the PDP identifier its AuthZEN metadata publishes
	// (--authzen-base-url); empty: the serving certificate's first name and
	// the port served on (none over plain HTTP).
	AuthZENBaseURL string
	// AuthZENMaxBody bounds an AuthZEN request's body
	// (--authzen-max-body-bytes): 1,000 fully specified evaluations fit in
	// the default.
	AuthZENMaxBody int64
	// SignGroupMax is the most /v1/check records one signature covers
	// (--sign-group-max): records that arrive while one is being signed
	// share the next. 0: every record its own signature.
	SignGroupMax int
	// SearchPageSize is a search page's size when the request names no
	// page.limit, and the largest it may name (--authzen-search-page-size).
	SearchPageSize int
	// SearchMaxCandidates bounds the candidates one search page evaluates
	// (--authzen-search-max-candidates): a page that reaches it stops
	// there, with a next_token, however few results it holds.
	SearchMaxCandidates int
	Logger              *slog.Logger
	Authenticator       authn.Authenticator // replaces the backend, for tests
}

// Validate refuses flags that cannot be honoured, naming them. It changes
// nothing; [New] fills the defaults of a struct left unset.
func (o Options) Validate() error {
	var errs []error
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Auth.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Serve.Listen == "" {
		errs = append(errs, errors.New("pdp: --listen is required"))
	} else if o.InsecureHTTP {
		host, _, err := net.SplitHostPort(o.Serve.Listen)
		ip := net.ParseIP(host)
		if err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			errs = append(errs, fmt.Errorf("pdp: --insecure-http serves plain HTTP only on a loopback address; --listen %q is not one", o.Serve.Listen))
		}
		if o.Serve.HasTLS() {
			errs = append(errs, errors.New("pdp: --insecure-http and --tls-cert-file/--tls-key-file contradict each other"))
		}
	} else if !o.Serve.HasTLS() {
		errs = append(errs, errors.New("pdp: --tls-cert-file and --tls-key-file are required (or --insecure-http on a loopback --listen)"))
	}
	if o.AuthZENBaseURL != "" {
		u, err := url.Parse(o.AuthZENBaseURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("pdp: --authzen-base-url %q: want an https:// URL with no query or fragment (AuthZEN 1.0 §9.1)", o.AuthZENBaseURL))
		} else if strings.Trim(u.Path, "/") != "" {
			errs = append(errs, fmt.Errorf("pdp: --authzen-base-url %q: the pdp serves its endpoints at the root, so the identifier has no path (the per-package identifier is <base>/<package id>, from /.well-known/authzen-configuration/<package id>)", o.AuthZENBaseURL))
		}
	}
	o.authzenDefaults() // a copy: zero is the default
	if o.AuthZENMaxBody < MaxBody || o.AuthZENMaxBody > MaxAuthZENBody {
		errs = append(errs, fmt.Errorf("pdp: --authzen-max-body-bytes %d: want %d to %d", o.AuthZENMaxBody, MaxBody, MaxAuthZENBody))
	}
	if o.SearchPageSize < 1 || o.SearchPageSize > MaxSearchPageSize {
		errs = append(errs, fmt.Errorf("pdp: --authzen-search-page-size %d: want 1 to %d", o.SearchPageSize, MaxSearchPageSize))
	}
	if o.SearchMaxCandidates < o.SearchPageSize || o.SearchMaxCandidates > MaxSearchCandidates {
		errs = append(errs, fmt.Errorf("pdp: --authzen-search-max-candidates %d: want --authzen-search-page-size (%d) to %d", o.SearchMaxCandidates, o.SearchPageSize, MaxSearchCandidates))
	}
	if o.SignGroupMax < 0 || o.SignGroupMax > MaxSignGroup {
		errs = append(errs, fmt.Errorf("pdp: --sign-group-max %d: want 0 (each record signed alone) to %d", o.SignGroupMax, MaxSignGroup))
	}
	if o.ReloadInterval < 0 {
		errs = append(errs, fmt.Errorf("pdp: --reload-interval %s: want a positive duration", o.ReloadInterval))
	}
	if o.PolicyDir == "" {
		errs = append(errs, errors.New("pdp: --policy-dir is required"))
	}
	if o.Registry == "" {
		errs = append(errs, errors.New("pdp: --registry is required"))
	}
	if o.SigningKeyFile == "" {
		errs = append(errs, errors.New("pdp: --signing-key-file is required (callerauth decision keygen --out FILE makes one): records must be signed"))
	}
	if o.CallerAuthMode == ModeOff {
		if !o.AllowAuthOff {
			errs = append(errs, errors.New("pdp: --caller-auth-mode off needs --insecure-caller-auth-off: without it anyone who reaches the PDP obtains decisions"))
		}
	} else if _, err := callerAuthMode(o.CallerAuthMode); err != nil {
		errs = append(errs, fmt.Errorf("pdp: --caller-auth-mode %q: want enforce, warn or off", o.CallerAuthMode))
	}
	if o.CallerAudience == "" {
		errs = append(errs, errors.New("pdp: --caller-audience may not be empty"))
	}
	bindings, _, err := parseBindings(o.CallerBindings)
	if err != nil {
		errs = append(errs, err)
	}
	if o.CallerAuthMode != ModeOff && len(bindings) == 0 {
		errs = append(errs, errors.New("pdp: at least one --caller-binding SYSTEM=PRINCIPAL is required: no caller could represent any system"))
	}
	return errors.Join(errs...)
}

// authzenDefaults fills the AuthZEN limits a struct left unset.
func (o *Options) authzenDefaults() {
	if o.AuthZENMaxBody == 0 {
		o.AuthZENMaxBody = DefaultAuthZENMaxBody
	}
	if o.SearchPageSize == 0 {
		o.SearchPageSize = DefaultSearchPageSize
	}
	if o.SearchMaxCandidates == 0 {
		o.SearchMaxCandidates = DefaultSearchMaxCandidates
	}
}

// parseBindings reads --caller-binding SYSTEM=PRINCIPAL values. A principal
// in the service-account form must be a well-formed one (it is compared by
// exact string with what TokenReview returns); any other principal is
// allowed, since a TokenReview backed by another authenticator can return
// other usernames, but comes back in warnings: a ServiceAccount token never
// matches it.
func parseBindings(values []string) (map[string]string, []string, error) {
	bindings := map[string]string{}
	var errs []error
	var warnings []string
	for _, b := range values {
		sys, principal, ok := strings.Cut(b, "=")
		if !ok || sys == "" || principal == "" || strings.TrimSpace(b) != b {
			errs = append(errs, fmt.Errorf("pdp: --caller-binding %q: want SYSTEM=PRINCIPAL", b))
			continue
		}
		if _, dup := bindings[sys]; dup {
			errs = append(errs, fmt.Errorf("pdp: --caller-binding: system %q is bound twice", sys))
		}
		bindings[sys] = principal
		if strings.HasPrefix(principal, binding.ServiceAccountPrefix) {
			if err := binding.ValidateServiceAccountUsername(principal); err != nil {
				errs = append(errs, fmt.Errorf("pdp: --caller-binding %q: principal %q: %w", b, principal, err))
			}
		} else {
			warnings = append(warnings, fmt.Sprintf("--caller-binding %q: principal %q is not a service-account username (%s<namespace>:<name>); a ServiceAccount token will never match it", b, principal, binding.ServiceAccountPrefix))
		}
	}
	return bindings, warnings, errors.Join(errs...)
}

// state is what a reload replaces, whole: the policy package, the registry
// and the record signer. A check reads one state, so the key that signs its
// record is one that the JWKS endpoint publishes from that moment on.
type state struct {
	pkg    *policy.Package
	reg    *policy.Registry
	signer *decision.Signer
	// evalSigner signs AuthZEN answers with the same keys, under
	// EvaluationProfile.
	evalSigner *decision.Signer
	// searchSigner signs AuthZEN search pages, under SearchProfile.
	searchSigner *decision.Signer
	// metaSigner signs the AuthZEN metadata's signed_metadata.
	metaSigner *decision.Signer
	// group shares signer's signatures among the checks that arrive
	// together; nil with --sign-group-max 0.
	group *decision.Group
	// pageKey MACs search page tokens: derived from the signing keys, so
	// every replica shares it and a key rotation replaces it.
	pageKey []byte
}

// callerAuthMode reads --caller-auth-mode other than off: enforce, or warn
// (the PDP's name for the guard's audit).
func callerAuthMode(s string) (guard.Mode, error) {
	if s == ModeWarn {
		s = string(guard.Audit)
	}
	return guard.ParseMode(s)
}

// Server is a running PDP.
type Server struct {
	o     Options
	m     *serve.Manager
	port  atomic.Int32 // the API's TCP port, once Run listens
	log   *slog.Logger
	guard *serve.CallerAuth
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
	azLatency       *prometheus.HistogramVec
	now             func() time.Time
}

// New validates the options, loads and validates the policy package and the
// registry, the signing keys and the serving key pair, and builds the
// caller authentication.
func New(o Options) (*Server, error) {
	o.Serve.Defaults()
	o.authzenDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m, err := serve.New("pdp", o.Serve, o.Auth, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("pdp: %w", err)
	}
	m.Health().Registry.MustRegister(version.Collector("pdp"))
	s := &Server{o: o, m: m, log: m.Logger(), health: m.Health(), now: time.Now}
	s.groupSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdp_signing_group_records", Help: "Records /v1/check signed under one signature (group-commit signing; 1 when the pdp is idle).", Buckets: prometheus.ExponentialBuckets(1, 2, 8)})
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdp_reloads_total", Help: "Reloads of the policy package, registry and signing keys, by result (a failed one keeps the previous version serving)."}, []string{"result"})
	if s.state, err = watched.New(watched.Config[*state]{
		What:     "pdp: the policy, registry and signing keys",
		Paths:    []string{o.PolicyDir, o.Registry, o.SigningKeyFile},
		Load:     s.load,
		Interval: cmp.Or(o.ReloadInterval, 2*time.Second),
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
	reg.MustRegister(s.checks, s.latency, s.reloads, s.evaluations, s.azLatency, s.searchEvaluated, s.signFailures, s.groupSize)
	bindings, warnings, _ := parseBindings(o.CallerBindings)
	for _, w := range warnings {
		s.log.Warn("pdp: " + w)
	}
	if o.CallerAuthMode == ModeOff {
		s.log.Warn("pdp: --caller-auth-mode off: callers are NOT authenticated; anyone who reaches the PDP obtains decisions, and records say authenticated: false")
		return s, nil
	}
	mode, _ := callerAuthMode(o.CallerAuthMode) // validated above
	s.guard, err = m.Guard(serve.GuardSpec{
		Audience: o.CallerAudience, Mode: mode, Rule: binding.SystemBinding(bindings),
		MetricsPrefix: "pdp", Authenticator: o.Authenticator,
	})
	if err != nil {
		return nil, fmt.Errorf("pdp: caller authentication: %w", err)
	}
	return s, nil
}

// load reads the package, the registry and the keys, and makes the
// signers (and the group that shares /v1/check's signatures, unless
// --sign-group-max is 0).
func (s *Server) load() (*state, error) {
	st, err := load(s.o.PolicyDir, s.o.Registry, s.o.SigningKeyFile)
	if err != nil {
		return nil, err
	}
	if s.o.SignGroupMax > 0 {
		st.group = decision.NewGroup(st.signer, s.o.SignGroupMax, s.now)
		st.group.Observe = func(n int) { s.groupSize.Observe(float64(n)) }
	}
	return st, nil
}

func load(dir, registry, keyFile string) (*state, error) {
	pkg, err := policy.LoadPackage(dir)
	if err != nil {
		return nil, err
	}
	reg, err := pkg.LoadRegistry(registry)
	if err != nil {
		return nil, err
	}
	keys, err := decision.LoadKeyFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pdp: --signing-key-file: %w", err)
	}
	// One key set, one signer per format: a record of one is never taken
	// for another (each has its own JWS typ).
	st := &state{pkg: pkg, reg: reg}
	for _, f := range []struct {
		p  decision.Profile
		to **decision.Signer
	}{{RecordProfile, &st.signer}, {EvaluationProfile, &st.evalSigner}, {SearchProfile, &st.searchSigner}, {MetadataProfile, &st.metaSigner}} {
		if *f.to, err = decision.NewSigner(f.p, keys...); err != nil {
			return nil, fmt.Errorf("pdp: --signing-key-file %s: %w", keyFile, err)
		}
	}
	if st.pageKey, err = pageTokenKey(keys); err != nil {
		return nil, fmt.Errorf("pdp: --signing-key-file %s: %w", keyFile, err)
	}
	return st, nil
}

// pageTokenKey derives the key that MACs search page tokens from the
// signing keys' private material: secret as they are, the same on every
// replica that mounts them, replaced when they rotate.
func pageTokenKey(keys []crypto.Signer) ([]byte, error) {
	m := hmac.New(sha256.New, []byte("callerauth pdp search page token v2"))
	for _, k := range keys {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(m, "%d:", len(der)) // length-prefixed: no two key lists collide
		m.Write(der)
	}
	return m.Sum(nil), nil
}

// Reload loads the package, the registry and the signing keys again, all
// or nothing; on failure the previous version keeps serving and the error
// says why.
func (s *Server) Reload() error { return s.state.Reload() }

func kids(s *decision.Signer) []string {
	var out []string
	for _, k := range s.JWKS().Keys {
		out = append(out, k.KeyID)
	}
	return out
}

// EvaluationSigner returns the signer of AuthZEN answers now in use.
func (s *Server) EvaluationSigner() *decision.Signer { return s.state.Get().evalSigner }

// Signer returns the record signer now in use.
func (s *Server) Signer() *decision.Signer { return s.state.Get().signer }

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

// checkHandler is POST /v1/check: the guard's middleware (the caller
// first, from the header alone — under enforce a caller with no identity is
// refused before a byte of the body is read — then the body, then the
// system binding), then the decision. With caller authentication off there
// is no middleware.
func (s *Server) checkHandler() http.Handler {
	return s.guarded(s.extract, http.HandlerFunc(s.decide), s.latency)
}

// guarded wraps an API handler as every endpoint is wrapped: the guard's
// middleware with extract (or, with caller authentication off, extract
// alone), and the request's latency observed.
func (s *Server) guarded(extract guard.HTTPRequest, h http.Handler, latency prometheus.Observer) http.Handler {
	var inner http.Handler
	if s.guard == nil {
		inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := extract(r); err != nil {
				badRequest(w, r, err)
				return
			}
			h.ServeHTTP(w, r)
		})
	} else {
		inner = s.guard.Middleware(extract, guard.RequireIdentity(), guard.WithBadRequest(badRequest),
			guard.WithRefusal(func(w http.ResponseWriter, _ *http.Request, v *guard.Verdict) { s.refuse(w, v) }))(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { latency.Observe(time.Since(start).Seconds()) }()
		inner.ServeHTTP(w, r)
	})
}

// extract reads and checks the body for the guard, and leaves it readable
// for decide.
func (s *Server) extract(r *http.Request) (binding.Request, error) {
	body, err := readBody(r)
	if err != nil {
		return binding.Request{}, err
	}
	req, err := decodeRequest(body)
	if err != nil {
		return binding.Request{}, err
	}
	r.Body = &decodedBody{ReadCloser: readCloser(body), req: req}
	return binding.Request{System: req.System, Method: "POST /v1/check"}, nil
}

func badRequest(w http.ResponseWriter, _ *http.Request, err error) {
	field := "body"
	var re *requestError
	if errors.As(err, &re) {
		field = re.field
	}
	guard.WriteHTTPError(w, http.StatusBadRequest, guard.ReasonBadRequest, err.Error(), "field", field)
}

// decide evaluates a request the middleware let through and signs the
// record.
func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	req, err := s.request(r)
	if err != nil {
		badRequest(w, r, err)
		return
	}
	caller, mode := s.caller(r)
	st := s.state.Get() // one snapshot: policy, registry and signer
	if st.pkg.API != policy.APICheck {
		guard.WriteHTTPError(w, http.StatusNotFound, "api_not_served", fmt.Sprintf("policy package %s serves AuthZEN (POST %s), not /v1/check", st.pkg.ID, PathEvaluation))
		return
	}
	d := st.pkg.Evaluate(st.reg, *req)
	if d.Detail != "" {
		s.log.Info("pdp: denied against the registry", "reason", d.Reason, "detail", guard.LogValue(d.Detail))
	}
	rec := &decision.Record{DecisionID: uuid.NewString(), Reason: d.Reason, PolicyVersion: st.pkg.Version, Caller: caller,
		Provenance: decision.Provenance{Evaluator: policy.Evaluator, Mode: mode, PolicyPackageID: st.pkg.ID,
			PolicyPackageDigest: st.pkg.Digest, RegistrySnapshotDigest: st.reg.Digest, DecidedAt: s.now().UTC()}}
	rec.Effect = decision.Deny
	if d.Allow {
		rec.Effect = decision.Allow
	}
	rec.BindCanonical(req.Canonical())
	var body []byte
	if st.group != nil {
		g, err := st.group.Sign(rec)
		if err != nil {
			s.signingFailed(w, err)
			return
		}
		body = groupBody(g)
	} else {
		signed, err := st.signer.Sign(rec)
		if err != nil {
			s.signingFailed(w, err)
			return
		}
		body = responseBody(signed)
	}
	s.checks.WithLabelValues(rec.Effect, rec.Reason).Inc()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// groupBody is a group-signed check's response: {"record", "root_jws",
// "proof"} (decision.Signed).
func groupBody(g decision.GroupSigned) []byte {
	b := make([]byte, 0, len(g.Record)+len(g.RootJWS)+64+48*len(g.Proof.Hashes))
	b = append(b, `{"record":`...)
	b = append(b, g.Record...)
	b = append(b, `,"root_jws":"`...)
	b = append(b, g.RootJWS...)
	b = append(b, `","proof":{"index":`...)
	b = strconv.AppendInt(b, int64(g.Proof.Index), 10)
	b = append(b, `,"hashes":[`...)
	for i, h := range g.Proof.Hashes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, h...)
		b = append(b, '"')
	}
	return append(b, "]}}\n"...)
}

// signingFailed answers 500 signing_failed: no unsigned answer ever leaves.
func (s *Server) signingFailed(w http.ResponseWriter, err error) {
	s.signFailures.Inc()
	s.log.Error("pdp: signing failed", "err", err)
	guard.WriteHTTPError(w, http.StatusInternalServerError, "signing_failed", "the decision record could not be signed")
}

// caller is the record's caller block for a request the middleware let
// through, and the mode. The guard counted any violation
// (pdp_auth_violations_total), let through under warn or not.
func (s *Server) caller(r *http.Request) (decision.Caller, string) {
	caller := decision.Caller{Authenticated: false, Reason: "caller_auth_off"}
	if v, ok := guard.FromContext(r.Context()); ok {
		caller = callerBlock(v, s.o.Auth.VerifiedBy())
	}
	return caller, s.o.CallerAuthMode
}

// refuse answers a refused caller (the guard counted it).
func (s *Server) refuse(w http.ResponseWriter, v *guard.Verdict) {
	guard.WriteRefusal(w, v)
}

// callerBlock is the record's caller: who asked, or, under warn, that the
// caller was not authenticated and what enforce would have said.
func callerBlock(v *guard.Verdict, verifiedBy string) decision.Caller {
	if v.Reason != "" || v.Caller == nil {
		return decision.Caller{Authenticated: false, Reason: v.Reason}
	}
	c := v.Caller
	out := decision.Caller{Authenticated: true, Principal: c.Username, UID: c.UID, CredentialID: c.CredentialID,
		PodName: c.PodName, PodUID: c.PodUID, Audiences: c.Audiences, AuthenticatedBy: verifiedBy}
	if !c.IssuedAt.IsZero() {
		t := c.IssuedAt.UTC()
		out.TokenIssuedAt = &t
	}
	if !c.Expiry.IsZero() {
		t := c.Expiry.UTC()
		out.TokenExpiresAt = &t
	}
	return out
}

// requestError is a check request that cannot be read, naming the field.
type requestError struct {
	field, msg string
}

func (e *requestError) Error() string { return e.msg }

func badField(field, format string, args ...any) error {
	return &requestError{field: field, msg: fmt.Sprintf(format, args...)}
}

// readBody reads a check request's body: JSON only, at most MaxBody bytes.
func readBody(r *http.Request) ([]byte, error) { return readBodyLimit(r, MaxBody) }

// readAuthZENBody reads an AuthZEN request's body, at most
// --authzen-max-body-bytes.
func (s *Server) readAuthZENBody(r *http.Request) ([]byte, error) {
	return readBodyLimit(r, s.o.AuthZENMaxBody)
}

// readBodyLimit reads a JSON request body of at most limit bytes.
func readBodyLimit(r *http.Request, limit int64) ([]byte, error) {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/json" {
		return nil, badField("Content-Type", "Content-Type must be application/json, got %q", guard.LogValue(r.Header.Get("Content-Type")))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, badField("body", "the body could not be read")
	}
	if int64(len(body)) > limit {
		return nil, badField("body", "body larger than %d bytes", limit)
	}
	return body, nil
}

// decodeRequest reads a check request strictly: I-JSON (RFC 7493: no
// member twice, UTF-8 only, no unpaired surrogate — each would let the PDP
// and a consumer read different requests under one digest), no unknown
// fields, every field present with its type and no null anywhere. The
// error names the field.
func decodeRequest(body []byte) (*policy.Request, error) {
	// One pass: the I-JSON check and the split into members together.
	raw := map[string]json.RawMessage{}
	if err := ijson.Members(body, func(name, v []byte) error {
		raw[string(name)] = v
		return nil
	}); err != nil {
		var e *ijson.Error
		if errors.As(err, &e) && e.Member() != "" {
			return nil, badField(e.Member(), "field %q: %s", e.Member(), e.Problem)
		}
		return nil, badField("body", "body is not a JSON object: %v", err)
	}
	var req policy.Request
	fields := []struct {
		name string
		dst  *string
	}{
		{"system", &req.System}, {"subject", &req.Subject}, {"tenant", &req.Tenant}, {"lane", &req.Lane},
		{"resource", &req.Resource}, {"stage", &req.Stage}, {"purpose", &req.Purpose},
	}
	known := map[string]bool{"fields": true}
	for _, f := range fields {
		known[f.name] = true
		v, ok := raw[f.name]
		if !ok || string(v) == "null" {
			return nil, badField(f.name, "field %q is required", f.name)
		}
		str, ok := ijson.String(v)
		if !ok {
			return nil, badField(f.name, "field %q must be a string", f.name)
		}
		*f.dst = str
		if *f.dst == "" && f.name != "purpose" {
			return nil, badField(f.name, "field %q may not be empty", f.name)
		}
	}
	v, ok := raw["fields"]
	if !ok || string(v) == "null" {
		return nil, badField("fields", `field "fields" is required`)
	}
	req.Fields = []string{}
	var notString error
	if err := ijson.Elements(v, func(e []byte) error {
		// A null element would otherwise become "" in the record.
		f, ok := ijson.String(e)
		if !ok {
			notString = badField("fields", `field "fields": element %d must be a string, not %s`, len(req.Fields), guard.LogValue(string(e)))
			return notString
		}
		req.Fields = append(req.Fields, f)
		return nil
	}); notString != nil {
		return nil, notString
	} else if err != nil {
		return nil, badField("fields", `field "fields" must be a list of strings`)
	}
	for k := range raw {
		if !known[k] {
			return nil, badField(k, "unknown field %q", guard.LogValue(k))
		}
	}
	return &req, nil
}

// Run serves until ctx ends, through the service skeleton: the API (HTTPS
// with the key pair reloaded on change, or plain HTTP on loopback), the
// metrics listener, and the reload loop. SIGHUP, or a change to the policy,
// registry or signing key files (polled), reloads them. A listener that cannot
// be opened, or dies, is an error.
func (s *Server) Run(ctx context.Context) error {
	lis, err := serve.ListenTCP("--listen", s.o.Serve.Listen)
	if err != nil {
		return fmt.Errorf("pdp: %w", err)
	}
	if cfg := s.m.TLSConfig(); cfg != nil {
		cfg.NextProtos = []string{"h2", "http/1.1"}
		lis = tls.NewListener(lis, cfg)
	}
	if a, ok := lis.Addr().(*net.TCPAddr); ok {
		s.port.Store(int32(a.Port)) //nolint:gosec // a TCP port fits.
	}
	s.m.ServeHTTP("api", lis, s.Handler())
	s.m.Add(serve.Named("policy reload", serve.RunnableFunc(s.reloadLoop)))
	st := s.state.Get()
	s.m.Set("address", lis.Addr().String(), "caller_auth_mode", s.o.CallerAuthMode,
		"package", st.pkg.ID, "policy_version", st.pkg.Version, "signing_kid", st.signer.KeyID(), "published_kids", kids(st.signer))
	if err := s.m.Run(ctx); err != nil {
		_ = lis.Close()
		return fmt.Errorf("pdp: %w", err)
	}
	return nil
}

// reloadLoop reloads the policy and keys on SIGHUP, and when their files
// change (looked at every --reload-interval).
func (s *Server) reloadLoop(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = s.Reload()
			}
		}
	}()
	return s.state.Start(ctx)
}

func readCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// responseBody is the check's answer, {"record": …, "record_jws": "…"},
// written once: the record is canonical JSON already and a compact JWS is
// base64url and dots, so there is nothing to re-encode
// (TestResponseBodyIsTheEncoding).
func responseBody(s *decision.Signed) []byte {
	b := make([]byte, 0, len(s.Record)+len(s.RecordJWS)+32)
	b = append(b, `{"record":`...)
	b = append(b, s.Record...)
	b = append(b, `,"record_jws":"`...)
	b = append(b, s.RecordJWS...)
	return append(b, "\"}\n"...)
}

// decodedBody is a body the guard's extractor has read and decoded: the
// handler takes the decoded request from it instead of decoding the same
// bytes again.
type decodedBody struct {
	io.ReadCloser
	req any // *policy.Request or *evaluationsRequest
}

// request is the check request: decoded once, by the extractor when there
// is one.
func (s *Server) request(r *http.Request) (*policy.Request, error) {
	if d, ok := r.Body.(*decodedBody); ok {
		if req, ok := d.req.(*policy.Request); ok {
			return req, nil
		}
	}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return decodeRequest(body)
}
