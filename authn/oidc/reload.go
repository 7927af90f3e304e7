package oidc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/internal/foundation/watched"
)

// DefaultReloadInterval is how often a [Reloading] authenticator looks at
// its file.
const DefaultReloadInterval = 10 * time.Second

// ReloadingConfig configures [NewReloading].
type ReloadingConfig struct {
	// Path of the file. Required.
	Path string
	// Parse reads the file's contents (at most MaxConfigBytes) into the
	// issuers. Required: authconfig.Parse reads an
	// AuthenticationConfiguration (authconfig.NewReloading sets it).
	Parse func(doc []byte) (Config, error)
	// Interval between two looks at the file. Default
	// DefaultReloadInterval.
	Interval time.Duration
	// Base holds the settings the file does not (Leeway, Timeout,
	// MaxStaleKeys, Logger, Now); its Issuers are ignored.
	Base Config
	// Check is the service's own requirement of the issuers, applied to
	// the first file and to every new one (the vmafx controller: one
	// constant tenant per issuer). Optional.
	Check func(Config) error
	// Logger reports reloads and refused files. Default slog.Default().
	Logger *slog.Logger
}

// Reloading is an [Authenticator] over a file of issuers (an
// AuthenticationConfiguration, package authn/authconfig) that follows the
// file: a changed file is read, validated and
// compiled like the first, and takes over from the next verification once
// every issuer in it is ready (its discovery document and keys fetched);
// a file that does not load, or one with an issuer not ready, is refused,
// logged and counted, and the last good one stays in force, the file
// tried again at the next look — as the API server does with its
// --authentication-config, so that the two never map one token to two
// users while an issuer is down. Run it (Start) for as long as it serves.
type Reloading struct {
	cfg ReloadingConfig
	// v is the configuration in force, followed on disk
	// (internal/foundation/watched; Retry: a file refused for an issuer
	// not ready yet is tried again at every look).
	v *watched.Value[*loaded]

	mu      sync.Mutex     // guards retired and metrics
	retired Stats          // the key-set counts of the authenticators replaced
	metrics *issuerMetrics // set by Collectors

	reloadsOK, reloadsFailed atomic.Uint64
	started                  atomic.Bool // the first load done: later ones wait for every issuer
	// keysTried: every issuer of the configuration in force has been
	// asked for its keys once (Start asks the first's; a reload goes in
	// force only once its issuers have answered).
	keysTried atomic.Bool
}

type loaded struct {
	auth    *Authenticator
	hash    string
	issuers map[string]bool
}

var _ authn.Authenticator = (*Reloading)(nil)

// Layer is the reload as a layer (authn.Layer): a cached verdict of an
// issuer a reload removed is refused ([Reloading.Revoked]).
func (r *Reloading) Layer() authn.Layer { return authn.Layer{Authenticator: r, Revoked: r.Revoked} }

// NewReloading loads the file: one that cannot be honoured is an error,
// for the service to stop on at start-up.
func NewReloading(cfg ReloadingConfig) (*Reloading, error) {
	if cfg.Path == "" || cfg.Parse == nil {
		return nil, errors.New("oidc: a reloading authenticator needs the file's Path and its Parse")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultReloadInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Reloading{cfg: cfg}
	v, err := watched.New(watched.Config[*loaded]{
		What:     "oidc: the authentication configuration",
		Paths:    []string{cfg.Path},
		Load:     r.load,
		Same:     func(a, b *loaded) bool { return a.hash == b.hash },
		Interval: cfg.Interval,
		Retry:    true,
		Logger:   cfg.Logger,
		Result: func(err error) {
			if err != nil {
				r.reloadsFailed.Add(1)
			} else {
				r.reloadsOK.Add(1)
			}
		},
		Changed:  []func(old, new *loaded){r.replaced},
		Describe: func(l *loaded) []any { return []any{"hash", l.hash, "issuers", len(l.issuers)} },
	})
	if err != nil {
		return nil, err
	}
	r.v = v
	r.started.Store(true)
	return r, nil
}

// load reads, validates and compiles the file and builds its
// authenticator; after the first, it returns it only once every issuer in
// it is ready (its discovery document and keys fetched), as the API server
// waits for all before a new configuration takes over.
func (r *Reloading) load() (*loaded, error) {
	b, err := ReadConfigFile(r.cfg.Path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	c, err := r.cfg.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("oidc: %s: %w", r.cfg.Path, err)
	}
	if r.cfg.Check != nil {
		if err := r.cfg.Check(c); err != nil {
			return nil, fmt.Errorf("oidc: %s: %w", r.cfg.Path, err)
		}
	}
	full := r.cfg.Base
	full.Issuers = c.Issuers
	auth, err := New(full)
	if err != nil {
		return nil, fmt.Errorf("oidc: %s: %w", r.cfg.Path, err)
	}
	l := &loaded{auth: auth, hash: "sha256:" + hex.EncodeToString(sum[:]), issuers: map[string]bool{}}
	for _, ic := range c.Issuers {
		l.issuers[ic.Issuer] = true
	}
	if !r.started.Load() {
		return l, nil
	}
	if cur := r.v.Get(); cur.hash == l.hash {
		return l, nil // the same file: nothing to wait for
	}
	r.mu.Lock()
	m := r.metrics
	r.mu.Unlock()
	if m != nil {
		l.auth.useMetrics(m)
	}
	// Every issuer of the new file ready first: its keys fetched now,
	// each fetch bounded by Base.Timeout.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(max(len(l.issuers), 1))*l.auth.cfg.Timeout)
	defer cancel()
	if err := l.auth.Prefetch(ctx); err != nil {
		return nil, fmt.Errorf("oidc: %s: not every issuer is ready (the API server too waits for all): %w", r.cfg.Path, err)
	}
	return l, nil
}

// replaced accounts for a configuration that took over from old: the key
// sets' counts kept, the series of the issuers it removed dropped.
func (r *Reloading) replaced(old, l *loaded) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retired = r.retired.add(old.auth.Stats())
	if r.metrics != nil {
		l.auth.useMetrics(r.metrics)
		for iss := range old.issuers {
			if !l.issuers[iss] {
				r.metrics.forget(issuerHash(iss))
			}
		}
	}
}

// Authenticate verifies tok under the configuration in force.
func (r *Reloading) Authenticate(ctx context.Context, tok string) (*authn.Caller, error) {
	return r.v.Get().auth.Authenticate(ctx, tok)
}

// Revoked refuses a cached caller whose issuer a reload removed; a caller
// of an issuer still configured keeps its cached verdict (for the cache's
// TTL at most).
func (r *Reloading) Revoked(c *authn.Caller, _ time.Time) error {
	if c.Issuer != "" && !r.v.Get().issuers[c.Issuer] {
		return authn.Fail(authn.TokenInvalid, "issuer %q is no longer in the authentication configuration", c.Issuer)
	}
	return nil
}

// Hash is the SHA-256 (hex) of the file in force.
func (r *Reloading) Hash() string { return r.v.Get().hash }

// Stats are the key-set counts of every configuration loaded so far.
func (r *Reloading) Stats() Stats {
	r.mu.Lock()
	s := r.retired
	r.mu.Unlock()
	return s.add(r.v.Get().auth.Stats())
}

// Start asks every issuer of the configuration in force for its keys, at
// once (Ready once each has answered or failed, each within Base.Timeout;
// a failed one asked again with backoff), and looks at the file every
// Interval, until ctx ends; a serve.Runnable.
func (r *Reloading) Start(ctx context.Context) error {
	go r.prefetch(ctx)
	return r.v.Start(ctx)
}

// Ready reports whether every issuer of the configuration in force has
// been asked for its keys: those that answered verify their first token
// without a fetch of its own; one that did not (its identity provider
// down) costs the others no more than one Base.Timeout at start-up.
func (r *Reloading) Ready() bool { return r.keysTried.Load() }

// prefetch asks the first configuration's issuers for their keys until
// every one has answered or ctx ends, from a quarter of a second between
// tries doubling to five seconds.
func (r *Reloading) prefetch(ctx context.Context) {
	wait := 250 * time.Millisecond
	for {
		l := r.v.Get()
		fctx, cancel := context.WithTimeout(ctx, l.auth.cfg.Timeout)
		err := l.auth.Prefetch(fctx)
		cancel()
		r.keysTried.Store(true)
		if err == nil {
			return
		}
		r.cfg.Logger.Warn("oidc: the authentication configuration's issuers are not all ready yet", "err", err, "retry_in", wait.String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Reload looks at the file now: a changed one (or one refused before, an
// issuer perhaps ready now) is loaded.
func (r *Reloading) Reload() { r.v.Look() }

// Collectors export the reloads, the configuration in force and the key
// sets' counts (across reloads).
//
//	<prefix>_caller_config_reloads_total{result="success"|"failure"}
//	<prefix>_caller_config_info{hash}  1 for the file in force
//
// and the per-issuer series of [Authenticator.Collectors], a removed
// issuer's dropped at the reload that removes it.
func (r *Reloading) Collectors(prefix string) []prometheus.Collector {
	reloadsHelp := "Reloads of the AuthenticationConfiguration file after it changed, by result: success (in force from the next verification) or failure (refused; the last good file stays in force)."
	reloads := func(result string, n *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_caller_config_reloads_total", Help: reloadsHelp,
			ConstLabels: prometheus.Labels{"result": result}}, func() float64 { return float64(n.Load()) })
	}
	out := []prometheus.Collector{reloads("success", &r.reloadsOK), reloads("failure", &r.reloadsFailed),
		configInfo{r, prometheus.NewDesc(prefix+"_caller_config_info", "1 for the AuthenticationConfiguration in force, labelled with the SHA-256 of its file as sha256:<hex> (the API server's apiserver_authentication_config_controller_last_config_info form).", []string{"hash"}, nil)}}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = newIssuerMetrics(prefix)
	r.v.Get().auth.useMetrics(r.metrics)
	out = append(out, r.metrics.collectors()...)
	return append(out, keySetCollectors(prefix, r.Stats)...)
}

// configInfo is the info gauge of the file in force.
type configInfo struct {
	r    *Reloading
	desc *prometheus.Desc
}

func (c configInfo) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c configInfo) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, c.r.Hash())
}
