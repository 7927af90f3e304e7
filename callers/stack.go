package callers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/reason"
)

// Config is a completed configuration: what [Options.Complete] returns,
// or [Custom]. New reads it as it is.
type Config struct {
	o Options
	// mode is o.Mode read: ModeEnforce, ModeAudit or ModeOff.
	mode string
	// custom, when set, is the layer the cache fronts instead of a
	// backend New would make.
	custom     *authn.Layer
	verifiedBy string
}

// Custom is a configuration whose backend is auth — a validator of the
// program's own, or a test's — with the defaults (enforce, the default
// cache) around it: New adds the same cache, metrics and guard as for a
// backend it makes. verifiedBy names it in records and logs.
func Custom(auth authn.Authenticator, verifiedBy string) Config {
	return Config{o: NewOptions(), mode: ModeEnforce}.WithAuthenticator(auth, verifiedBy)
}

// WithAuthenticator is c with auth as its backend, every other setting
// (the mode, the audience, the cache) kept: a test's authenticator in a
// service's completed configuration. verifiedBy names it.
func (c Config) WithAuthenticator(auth authn.Authenticator, verifiedBy string) Config {
	return c.WithLayer(authn.Layer{Authenticator: auth}, verifiedBy)
}

// WithLayer is WithAuthenticator for a layer that states what it is
// (authn.Layer): its audiences, its revocation, the facts it never
// states.
func (c Config) WithLayer(l authn.Layer, verifiedBy string) Config {
	c.custom, c.verifiedBy = &l, verifiedBy
	return c
}

// Backend is BackendTokenReview, BackendOIDC, or "custom".
func (c Config) Backend() string {
	if c.custom != nil {
		return "custom"
	}
	return c.o.Backend
}

// Off reports whether callers are not authenticated at all (ModeOff):
// New refuses to build a guard.
func (c Config) Off() bool { return c.mode == ModeOff }

// Mode is the guard's mode; "" when Off.
func (c Config) Mode() guard.Mode {
	if c.Off() {
		return ""
	}
	return guard.Mode(c.mode)
}

// ModeName is --caller-auth-mode as given ("warn", say), for the
// start-up line and records.
func (c Config) ModeName() string { return c.o.Mode }

// FailOpen is Options.FailOpenOnUnavailable.
func (c Config) FailOpen() bool { return c.o.FailOpenOnUnavailable }

// Audience is the audience callers' tokens must be minted for; "" under
// AnyAudience.
func (c Config) Audience() string { return c.o.Audience }

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
	kv := []any{"caller_auth_mode", o.Mode, "caller_audience", o.Audience, "caller_backend", c.Backend(), "caller_cache_ttl", o.CacheTTL.String(), "caller_review_timeout", o.ReviewTimeout.String()}
	switch {
	case c.custom != nil:
		return kv
	case o.Backend == BackendOIDC:
		return append(kv, "caller_authentication_config", o.AuthenticationConfig)
	}
	return append(kv, "caller_issuers", o.Issuers, "caller_review_interval", o.ReviewInterval.String(), "caller_watch_bound_objects", o.WatchBoundObjects,
		"caller_review_qps", o.ReviewQPS)
}

// Service is what a service itself hands New: its name and its rule.
// Every other caller setting is in the Config.
type Service struct {
	// Name prefixes the metrics (my_service_guard_requests_total, ...).
	Name string
	// Rule is what the guard judges an authenticated caller by.
	Rule binding.Rule
	// Authorizer, optional, is the guard's: a judgement after the rule's.
	Authorizer guard.Authorizer
	// Registry, when set, registers every collector of the stack (the
	// guard's, the cache's, the backend's layers'); nil: the caller
	// registers Stack.Collectors itself.
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Tracer, when set, is the guard's (guard.Config.Tracer).
	Tracer trace.Tracer
}

// Reasons are every reason the guard the service makes can give: the
// authentication failures, the rule's and the authorizer's.
func (s Service) Reasons() []reason.Reason {
	rs := binding.Reasons(s.Rule)
	if s.Authorizer != nil {
		rs = reason.Union(rs, s.Authorizer.Reasons()...)
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
	// Authenticator is the verdict cache in front of the backend, as the
	// layer the guard asks.
	Authenticator authn.Layer
	// Collectors are the guard's, the cache's and each backend layer's
	// metrics (registered in Service.Registry when one was given).
	Collectors []prometheus.Collector
	// Runnables must run beside the service: the AuthenticationConfiguration
	// reload (oidc), the bound-object watches
	// (--caller-watch-bound-objects); none otherwise.
	Runnables []Runnable

	logger  *slog.Logger
	tracer  trace.Tracer
	backend string
}

// New makes the backend c names, the verdict cache in front of it, the
// metrics and the guard judging svc's rule: a service's callers, whole.
func New(c Config, svc Service) (*Stack, error) {
	switch {
	case svc.Name == "":
		return nil, errors.New("caller authentication: Service.Name is empty")
	case c.Off():
		return nil, errors.New("caller authentication: --caller-auth-mode off: no guard is built")
	}
	var b built
	if c.custom != nil {
		b.layer = *c.custom
	} else if err := b.backend(c.o, svc.Logger); err != nil {
		return nil, err
	}
	o := c.o
	cache := authn.NewCache(b.layer, authn.CacheConfig{TTL: off(o.CacheTTL), NegativeTTL: off(o.NegativeCacheTTL), MaxInFlight: o.MaxInFlight, MaxEntries: o.CacheMaxEntries})
	reg := prometheus.NewRegistry() // the guard's metrics, gathered here to be returned
	m, err := guard.NewMetrics(reg, guard.MetricsConfig{Prefix: svc.Name, Reasons: svc.Reasons(), Mode: c.Mode()})
	if err != nil {
		return nil, err
	}
	collectors := append([]prometheus.Collector{reg}, cache.Collectors(svc.Name)...)
	for _, l := range b.collecting {
		collectors = append(collectors, l.Collectors(svc.Name)...)
	}
	if svc.Registry != nil {
		for _, col := range collectors {
			if err := svc.Registry.Register(col); err != nil {
				return nil, fmt.Errorf("caller authentication: registering its metrics: %w", err)
			}
		}
	}
	g, err := guard.New(guard.Config{
		Mode: c.Mode(), FailOpenOnUnavailable: c.o.FailOpenOnUnavailable,
		Authenticator: cache.Layer(), Rule: svc.Rule, Authorizer: svc.Authorizer, Metrics: m, Logger: svc.Logger, Tracer: svc.Tracer, Backend: c.Backend(),
	})
	if err != nil {
		return nil, err
	}
	return &Stack{Guard: g, Authenticator: cache.Layer(), Collectors: collectors, Runnables: b.runnables, logger: svc.Logger, tracer: svc.Tracer, backend: c.Backend()}, nil
}

// Door is another guard over the stack's authentication (its verdict
// cache, its backend), judging door's rule always under enforce and never
// failing open: a second entrance to the same service with readers of
// its own (callerauth-proxy's decision-log read API). Its metrics are
// door.Name's, registered in door.Registry.
func (st *Stack) Door(door Service) (*guard.Guard, error) {
	if door.Name == "" || door.Rule == nil || door.Registry == nil {
		return nil, errors.New("caller authentication: a door needs a name, a rule and a registry")
	}
	m, err := guard.NewMetrics(door.Registry, guard.MetricsConfig{Prefix: door.Name, Reasons: door.Reasons(), Mode: guard.Enforce})
	if err != nil {
		return nil, err
	}
	if door.Logger == nil {
		door.Logger = st.logger
	}
	if door.Tracer == nil {
		door.Tracer = st.tracer
	}
	return guard.New(guard.Config{Mode: guard.Enforce, Authenticator: st.Authenticator, Rule: door.Rule, Authorizer: door.Authorizer,
		Metrics: m, Logger: door.Logger, Tracer: door.Tracer, Backend: st.backend})
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

// built is what backend made: the layer the cache fronts, the layers
// with metrics and what must run.
type built struct {
	layer      authn.Layer
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

// backend stacks the layers o names, each built with what it says of
// itself (authn.Layer: its audiences, its revocation, the facts it never
// states) and handed to the next as such; the verdict cache New puts on
// top reads them the same way. A new layer is one more step here: build
// it from b.layer, set b.layer to its Layer(), add its collectors and
// runnables.
func (b *built) backend(o Options, log *slog.Logger) error {
	if o.Backend == BackendOIDC {
		r, err := readAuthenticationConfig(oidc.ReloadingConfig{Path: o.AuthenticationConfig, Check: o.CheckIssuers, Logger: log,
			Base: oidc.Config{Audience: o.Audience, Timeout: o.ReviewTimeout, MaxStaleKeys: o.KeysMaxStale, Logger: log}})
		if err != nil {
			return fmt.Errorf("caller authentication: --caller-authentication-config: %w", err)
		}
		b.layer, b.collecting = r.Layer(), []collecting{r}
		b.run("authentication configuration reload", r)
		return nil
	}
	if o.Audience == "" {
		return errors.New("caller authentication: TokenReview needs an audience: a token minted for another service must not be accepted")
	}
	kcfg := kube.Config{Kubeconfig: o.Kubeconfig, Audiences: []string{o.Audience}, Timeout: o.ReviewTimeout, Issuers: o.Issuers,
		QPS: float32(o.ReviewQPS), Burst: o.ReviewBurst, MaxStaleKeys: o.KeysMaxStale, Logger: log}
	review, err := kube.New(kcfg)
	if err != nil {
		return fmt.Errorf("caller authentication: TokenReview: %w", err)
	}
	if o.ReviewInterval <= 0 && !o.WatchBoundObjects {
		b.layer = review.Layer()
		return nil
	}
	offline, err := kube.Offline(kcfg)
	if err != nil {
		return fmt.Errorf("caller authentication: offline verification: %w", err)
	}
	b.layer, b.collecting = offline.Layer(), []collecting{offline}
	if o.WatchBoundObjects {
		md, err := kube.MetadataClient(kcfg)
		if err != nil {
			return fmt.Errorf("caller authentication: --caller-watch-bound-objects: %w", err)
		}
		bound, err := kube.NewBound(kube.BoundConfig{Metadata: md, Offline: b.layer, Review: review.Layer(), NodeName: o.WatchNode, MaxWatchBreak: o.WatchMaxBreak})
		if err != nil {
			return fmt.Errorf("caller authentication: --caller-watch-bound-objects: %w", err)
		}
		b.layer, b.collecting = bound.Layer(), append(b.collecting, bound)
		b.run("bound-object watches", bound)
	}
	if o.ReviewInterval > 0 {
		// Credentials outnumber cached verdicts: a rotated token's review
		// stands until its interval lapses.
		r, err := authn.NewRecheck(authn.RecheckConfig{Offline: b.layer, Review: review.Layer(), Interval: o.ReviewInterval, MaxEntries: 10 * o.CacheMaxEntries})
		if err != nil {
			return err
		}
		b.layer, b.collecting = r.Layer(), append(b.collecting, r)
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
