package callers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/reason"
)

// Config is a completed configuration: what [Options.Complete] returns,
// or [Custom]. Build reads it as it is.
type Config struct {
	o Options
	// custom, when set, is the authenticator the cache fronts instead of
	// a backend Build would make.
	custom     authn.Authenticator
	verifiedBy string
}

// Custom is a configuration whose backend is auth — a validator of the
// program's own, or a test's — with the default cache in front of it:
// Build adds the same cache, metrics and guard as for a backend it makes.
// verifiedBy names it in records and logs.
func Custom(auth authn.Authenticator, verifiedBy string) Config {
	return Config{o: NewOptions(), custom: auth, verifiedBy: verifiedBy}
}

// Backend is BackendTokenReview, BackendOIDC, or "custom".
func (c Config) Backend() string {
	if c.custom != nil {
		return "custom"
	}
	return c.o.Backend
}

// VerifiedBy names the backend in records and logs: "TokenReview", "OIDC"
// or a custom authenticator's name.
func (c Config) VerifiedBy() string {
	switch {
	case c.custom != nil:
		return c.verifiedBy
	case c.o.Backend == BackendOIDC:
		return "OIDC"
	}
	return "TokenReview"
}

// Settings are the effective settings as key, value pairs, for a
// service's start-up line.
func (c Config) Settings() []any {
	o := c.o
	kv := []any{"caller_backend", c.Backend(), "caller_cache_ttl", o.CacheTTL.String(), "caller_review_timeout", o.ReviewTimeout.String()}
	switch {
	case c.custom != nil:
		return kv
	case o.Backend == BackendOIDC:
		return append(kv, "caller_authentication_config", o.AuthenticationConfig)
	}
	return append(kv, "caller_issuers", o.Issuers, "caller_review_interval", o.ReviewInterval.String(), "caller_watch_bound_objects", o.WatchBoundObjects,
		"caller_review_qps", o.ReviewQPS)
}

// Spec is what a service decides about its callers.
type Spec struct {
	// Audience the tokens must be minted for, on every backend: the
	// TokenReview's audience; under oidc a token must carry it as well as
	// satisfy the AuthenticationConfiguration, and a file none of whose
	// issuers lists it is refused (at start-up and at every reload).
	// Required for TokenReview; under oidc, empty means any audience the
	// file lists (the vmafx controller: one per tenant's issuer).
	Audience string
	// Mode, FailOpenOnUnavailable and Rule are the guard's.
	Mode                  guard.Mode
	FailOpenOnUnavailable bool
	Rule                  binding.Rule
	// Authorizer, optional, is the guard's: a judgement after the rule's.
	Authorizer guard.Authorizer
	// Registry, when set, registers every collector of the stack (the
	// guard's, the cache's, the backend's layers'); nil: the caller
	// registers Stack.Collectors itself. MetricsPrefix names them.
	Registry      prometheus.Registerer
	MetricsPrefix string
	Logger        *slog.Logger
	// WatchNode narrows --caller-watch-bound-objects' pod watch to the pods
	// of one node: a node agent's callers run there (tokens bound to pods
	// elsewhere are reviewed). Empty: every pod.
	WatchNode string
	// CheckIssuers is a service's own requirement of the oidc backend's
	// issuers, at start-up and at every reload (the vmafx controller: one
	// constant tenant per issuer). Optional.
	CheckIssuers func(oidc.Config) error
}

// Reasons are every reason the guard spec makes can give: the
// authentication failures, the rule's and the authorizer's.
func (spec Spec) Reasons() []reason.Reason {
	rs := binding.Reasons(spec.Rule)
	if spec.Authorizer != nil {
		rs = reason.Union(rs, spec.Authorizer.Reasons()...)
	}
	return rs
}

// Runnable is what must run beside the service for as long as it does
// (the shape of controller-runtime's manager.Runnable); String names it
// in logs. Ready reports whether the layer it runs has what answering
// needs — the bound-object view its first proof, the AuthenticationConfiguration's
// issuers their keys — so that a service opens its listeners after it
// (internal/serve's manager waits for it, bounded).
type Runnable interface {
	Start(ctx context.Context) error
	String() string
	Ready() bool
}

// Stack is a service's built caller authentication.
type Stack struct {
	// Guard authenticates and authorizes each request; it asks
	// Authenticator.
	Guard *guard.Guard
	// Authenticator is the verdict cache in front of the backend.
	Authenticator authn.Authenticator
	// Collectors are the guard's, the cache's and each backend layer's
	// metrics (registered in Spec.Registry when one was given).
	Collectors []prometheus.Collector
	// Runnables must run beside the service: the AuthenticationConfiguration
	// reload (oidc), the bound-object watches
	// (--caller-watch-bound-objects); none otherwise.
	Runnables []Runnable
}

// Build makes the backend c names, the verdict cache in front of it, the
// metrics and the guard.
func Build(c Config, spec Spec) (*Stack, error) {
	if spec.MetricsPrefix == "" {
		return nil, errors.New("caller authentication: Spec.MetricsPrefix is empty")
	}
	var b built
	if c.custom != nil {
		b.auth = c.custom
	} else if err := b.backend(c.o, spec); err != nil {
		return nil, err
	}
	o := c.o
	cache := authn.NewCache(b.auth, authn.CacheConfig{TTL: off(o.CacheTTL), NegativeTTL: off(o.NegativeCacheTTL), MaxInFlight: o.MaxInFlight, MaxEntries: o.CacheMaxEntries})
	reg := prometheus.NewRegistry() // the guard's metrics, gathered here to be returned
	m, err := guard.NewMetrics(reg, guard.MetricsConfig{Prefix: spec.MetricsPrefix, Reasons: spec.Reasons(), Mode: spec.Mode})
	if err != nil {
		return nil, err
	}
	collectors := append([]prometheus.Collector{reg}, cache.Collectors(spec.MetricsPrefix)...)
	for _, l := range b.collecting {
		collectors = append(collectors, l.Collectors(spec.MetricsPrefix)...)
	}
	if spec.Registry != nil {
		for _, col := range collectors {
			if err := spec.Registry.Register(col); err != nil {
				return nil, fmt.Errorf("caller authentication: registering its metrics: %w", err)
			}
		}
	}
	g, err := guard.New(guard.Config{
		Mode: spec.Mode, FailOpenOnUnavailable: spec.FailOpenOnUnavailable,
		Authenticator: cache, Rule: spec.Rule, Authorizer: spec.Authorizer, Metrics: m, Logger: spec.Logger,
	})
	if err != nil {
		return nil, err
	}
	return &Stack{Guard: g, Authenticator: cache, Collectors: collectors, Runnables: b.runnables}, nil
}

// off maps an option's zero (off) to the library's negative (off).
func off(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// collecting is a layer with metrics of its own.
type collecting interface {
	Collectors(prefix string) []prometheus.Collector
}

// built is what backend made: the authenticator the cache fronts, the
// layers with metrics and what must run.
type built struct {
	auth       authn.Authenticator
	collecting []collecting
	runnables  []Runnable
}

func (b *built) run(name string, r layerRunnable) {
	b.runnables = append(b.runnables, named{name, r})
}

// layerRunnable is a layer that runs beside the service: the
// AuthenticationConfiguration's reload, the bound-object view.
type layerRunnable interface {
	Start(context.Context) error
	Ready() bool
}

func (b *built) backend(o Options, spec Spec) error {
	log := spec.Logger
	if o.Backend == BackendOIDC {
		r, err := authconfig.NewReloading(oidc.ReloadingConfig{Path: o.AuthenticationConfig, Check: spec.CheckIssuers, Logger: log,
			Base: oidc.Config{Audience: spec.Audience, Timeout: o.ReviewTimeout, MaxStaleKeys: o.KeysMaxStale, Logger: log}})
		if err != nil {
			return fmt.Errorf("caller authentication: --caller-authentication-config: %w", err)
		}
		b.auth, b.collecting = r, []collecting{r}
		b.run("authentication configuration reload", r)
		return nil
	}
	if spec.Audience == "" {
		return errors.New("caller authentication: TokenReview needs an audience: a token minted for another service must not be accepted")
	}
	kcfg := kube.Config{Kubeconfig: o.Kubeconfig, Audiences: []string{spec.Audience}, Timeout: o.ReviewTimeout, Issuers: o.Issuers,
		QPS: float32(o.ReviewQPS), Burst: o.ReviewBurst, MaxStaleKeys: o.KeysMaxStale, Logger: log}
	review, err := kube.New(kcfg)
	if err != nil {
		return fmt.Errorf("caller authentication: TokenReview: %w", err)
	}
	if o.ReviewInterval <= 0 && !o.WatchBoundObjects {
		b.auth = review
		return nil
	}
	offline, err := kube.Offline(kcfg)
	if err != nil {
		return fmt.Errorf("caller authentication: offline verification: %w", err)
	}
	b.auth, b.collecting = offline, []collecting{offline}
	if o.WatchBoundObjects {
		md, err := kube.MetadataClient(kcfg)
		if err != nil {
			return fmt.Errorf("caller authentication: --caller-watch-bound-objects: %w", err)
		}
		bound, err := kube.NewBound(kube.BoundConfig{Metadata: md, Offline: offline, Review: review, Audiences: review.RequiredAudiences(), NodeName: spec.WatchNode, MaxWatchBreak: o.WatchMaxBreak})
		if err != nil {
			return fmt.Errorf("caller authentication: --caller-watch-bound-objects: %w", err)
		}
		b.auth, b.collecting = bound, append(b.collecting, bound)
		b.run("bound-object watches", bound)
	}
	if o.ReviewInterval > 0 {
		// Credentials outnumber cached verdicts: a rotated token's review
		// stands until its interval lapses.
		r, err := authn.NewRecheck(authn.RecheckConfig{Offline: b.auth, Review: review, Interval: o.ReviewInterval, MaxEntries: 10 * o.CacheMaxEntries})
		if err != nil {
			return err
		}
		b.auth, b.collecting = r, append(b.collecting, r)
	}
	return nil
}

type named struct {
	name string
	r    layerRunnable
}

func (n named) Start(ctx context.Context) error { return n.r.Start(ctx) }
func (n named) String() string                  { return n.name }
func (n named) Ready() bool                     { return n.r.Ready() }
