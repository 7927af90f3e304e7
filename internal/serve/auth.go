package serve

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
)

// Caller-authentication backends.
const (
	// BackendTokenReview asks the Kubernetes API server (authn/kube): it
	// sees revocation (a deleted pod's token).
	BackendTokenReview = "tokenreview"
	// BackendOIDC verifies offline against each trusted issuer's JWKS
	// (authn/oidc): one issuer per tenant.
	BackendOIDC = "oidc"
)

// AuthOptions are the caller-authentication settings every service shares.
// What a service decides for itself — the audience, the mode, fail-open, the
// rules — comes from its own flags or configuration and goes in
// [GuardSpec].
type AuthOptions struct {
	// Backend is BackendTokenReview (default) or BackendOIDC.
	Backend string
	// Kubeconfig is TokenReview's client; empty: in-cluster.
	Kubeconfig string
	// Issuers are the API server's service-account issuers: tokens that are
	// not JWTs of one of them are refused without a TokenReview. Empty:
	// every token is reviewed.
	Issuers []string
	// AuthenticationConfig is the oidc backend's Kubernetes
	// AuthenticationConfiguration file (the one an API server's
	// --authentication-config reads), followed on change
	// (oidc.Reloading).
	AuthenticationConfig string
	// CheckIssuers is a service's own requirement of the issuers of
	// AuthenticationConfig, at start-up and at every reload (the vmafx
	// controller: one constant tenant per issuer). Optional.
	CheckIssuers func(oidc.Config) error
	// CacheTTL is how long a successful verification is reused. Zero: the
	// default (2 minutes); negative: none is (--caller-cache-ttl 0), every
	// request is verified.
	CacheTTL time.Duration
	// NegativeCacheTTL is how long a token_invalid verdict is reused
	// (authn.CacheConfig.NegativeTTL). Zero: the default.
	NegativeCacheTTL time.Duration
	// MaxInFlight bounds the verifications running at once
	// (authn.CacheConfig.MaxInFlight). Zero: the default.
	MaxInFlight int
	// CacheMaxEntries bounds the verdict cache (authn.CacheConfig.MaxEntries).
	// Zero: the default.
	CacheMaxEntries int
	// ReviewTimeout bounds one verification, retries included.
	ReviewTimeout time.Duration
	// ReviewQPS and ReviewBurst bound the TokenReviews sent per second
	// (kube.Config.QPS, Burst). Zero: the defaults.
	ReviewQPS   float64
	ReviewBurst int
	// ReviewInterval, when positive, verifies tokens offline against the
	// API server's JWKS and sends a TokenReview only at a credential's
	// first sight and once per interval after (authn.Recheck): the longest
	// a deleted pod's token is still accepted. Zero: a TokenReview on
	// every verdict-cache miss.
	ReviewInterval time.Duration
	// WatchBoundObjects verifies tokens offline against the API server's
	// JWKS and checks what each is bound to — its service account and pod
	// — in metadata watches instead of a TokenReview (kube.Bound): no
	// TokenReview at steady state, and a deleted pod's token refused as
	// soon as the watch delivers the deletion. With ReviewInterval too, a
	// credential is also reviewed at first sight and once per interval.
	WatchBoundObjects bool
	// WatchMaxBreak is the longest the bound-object view answers after it
	// was last proven current (kube.BoundConfig.MaxWatchBreak); a failed
	// watch stops it at once. Zero: the default; at least 8 s.
	WatchMaxBreak time.Duration
	// KeysMaxStale bounds how long cached signing keys are trusted while
	// every JWKS fetch fails (oidc.Config.MaxStaleKeys), for the oidc
	// backend, --caller-review-interval and a service's own offline
	// verifier. Zero: the default.
	KeysMaxStale time.Duration
}

// Defaults sets every unset (zero) setting to its default: the backend to
// tokenreview, the cache, timeout, rate and key bounds to the library's.
// A service calls it before AddFlags, so that the flags show the defaults;
// Guard applies it to what it is given.
func (a *AuthOptions) Defaults() {
	a.Backend = cmp.Or(a.Backend, BackendTokenReview)
	a.CacheTTL = cmp.Or(a.CacheTTL, authn.DefaultCacheTTL)
	a.NegativeCacheTTL = cmp.Or(a.NegativeCacheTTL, authn.DefaultCacheNegativeTTL)
	a.MaxInFlight = cmp.Or(a.MaxInFlight, authn.DefaultCacheMaxInFlight)
	a.CacheMaxEntries = cmp.Or(a.CacheMaxEntries, authn.DefaultCacheMaxEntries)
	a.ReviewTimeout = cmp.Or(a.ReviewTimeout, kube.DefaultTimeout)
	a.ReviewQPS = cmp.Or(a.ReviewQPS, kube.DefaultQPS)
	a.ReviewBurst = cmp.Or(a.ReviewBurst, kube.DefaultBurst)
	a.WatchMaxBreak = cmp.Or(a.WatchMaxBreak, kube.DefaultMaxWatchBreak)
	a.KeysMaxStale = cmp.Or(a.KeysMaxStale, oidc.DefaultMaxStaleKeys)
}

// AddFlags registers every caller-authentication flag, with a's values
// after [AuthOptions.Defaults] as their defaults. Every service registers
// the whole set; [AuthOptions.Validate] refuses a flag that does not apply
// to the backend chosen.
func (a *AuthOptions) AddFlags(f *pflag.FlagSet) {
	a.Defaults()
	f.StringVar(&a.Backend, "caller-backend", a.Backend, "how callers' tokens are verified: tokenreview (the Kubernetes API server) or oidc (offline, against the issuers of --caller-authentication-config)")
	f.StringVar(&a.Kubeconfig, "kubeconfig", a.Kubeconfig, "tokenreview: kubeconfig of the API server that reviews tokens (default: in-cluster)")
	f.StringArrayVar(&a.Issuers, "caller-issuer", a.Issuers, "tokenreview: the API server's service-account issuer (repeatable); other tokens are refused without a review")
	f.StringVar(&a.AuthenticationConfig, "caller-authentication-config", a.AuthenticationConfig, "oidc: the trusted issuers, a Kubernetes AuthenticationConfiguration file (apiserver.config.k8s.io/v1, the file an API server's --authentication-config reads): issuers, audiences, CEL claim validation rules, claim mappings and user validation rules; the tenant and roles are the extra keys callerauth.dev/tenant and callerauth.dev/roles. Reloaded on change; a file that does not load is refused and the last good one stays")
	RemovedFlag(f, "caller-oidc-issuers", "the JSON issuers file")
	f.Var((*offDuration)(&a.CacheTTL), "caller-cache-ttl", "how long a successful verification is reused (bounds how long a revoked token may still work); 0: not reused, every request is verified")
	f.Var((*offDuration)(&a.NegativeCacheTTL), "caller-negative-cache-ttl", "how long a token_invalid verdict is reused, so a repeated bad token costs one verification per period; 0: not reused")
	f.IntVar(&a.MaxInFlight, "caller-max-in-flight", a.MaxInFlight, "verifications running at once; beyond, a request fails as validator_unavailable (cached callers are unaffected)")
	f.IntVar(&a.CacheMaxEntries, "caller-cache-max-entries", a.CacheMaxEntries, "verdicts the cache holds (successes and refusals); full, the least recently used verdict of the issuer holding the most is evicted (refusals count as one issuer), so no issuer is pushed below entries / active issuers")
	f.Var((*positiveDuration)(&a.ReviewTimeout), "caller-review-timeout", "how long one verification may take, retries included (a TokenReview, or an issuer's discovery and JWKS fetch)")
	f.Float64Var(&a.ReviewQPS, "caller-review-qps", a.ReviewQPS, "tokenreview: TokenReviews sent per second at most; a request that would wait past --caller-review-timeout fails as validator_unavailable")
	f.IntVar(&a.ReviewBurst, "caller-review-burst", a.ReviewBurst, "tokenreview: TokenReviews that may be sent at once above --caller-review-qps")
	f.DurationVar(&a.ReviewInterval, "caller-review-interval", a.ReviewInterval, "tokenreview: verify tokens offline against the API server's JWKS and review each credential only when first seen and once per this interval: the longest a deleted pod's token is still accepted (0: review on every cache miss; without --caller-issuer, the issuer is read from the API server's discovery document at start-up)")
	f.BoolVar(&a.WatchBoundObjects, "caller-watch-bound-objects", a.WatchBoundObjects, "tokenreview: verify tokens offline against the API server's JWKS and check the service account and pod each is bound to in a metadata watch instead of a TokenReview; a deleted pod's token is refused within seconds. Other tokens, and all while the watch is unsynced or broken past --caller-watch-max-break, are reviewed; with --caller-review-interval, each credential is also reviewed when first seen and once per interval (needs RBAC to list and watch pods and serviceaccounts; without --caller-issuer, the issuer is read from the API server's discovery document at start-up)")
	f.Var((*positiveDuration)(&a.WatchMaxBreak), "caller-watch-max-break", "--caller-watch-bound-objects: the longest the view answers after it was last proven current through the API server (a consistent list of one object every (bound - 2s)/2, each watch opened with that server-side timeout, so that the API server's bookmark before the deadline completes the proof); a failed watch or proof stops it at once; while it is stopped every token is reviewed, and a cached verdict stands for at most this long (at least 8s)")
	f.Var((*positiveDuration)(&a.KeysMaxStale), "caller-keys-max-stale", "offline verification (oidc, --caller-review-interval, --caller-watch-bound-objects): how long the last fetched signing keys are still trusted while every JWKS fetch fails; past it, validator_unavailable")
}

// RemovedFlag registers a flag that no longer exists — a file format
// callerauth read before the AuthenticationConfiguration — so that giving
// it stops the process saying what to do instead of "unknown flag".
func RemovedFlag(f *pflag.FlagSet, name, what string) {
	f.Var(removed{name, what}, name, "removed: "+what+" — callerauth config convert FILE writes the AuthenticationConfiguration for --caller-authentication-config")
	_ = f.MarkHidden(name)
}

type removed struct{ name, what string }

func (r removed) String() string { return "" }
func (r removed) Set(string) error {
	return fmt.Errorf("--%s (%s) was removed: callerauth config convert FILE writes the same issuers as a Kubernetes AuthenticationConfiguration; give it with --caller-authentication-config", r.name, r.what)
}
func (r removed) Type() string { return "file" }

// readBy says, for each caller-authentication flag only some settings
// read, when it is read: given the backend and whether tokens are verified
// offline beside TokenReview (--caller-review-interval or
// --caller-watch-bound-objects) and whether the bound-object view runs.
var readBy = map[string]struct {
	when string
	read func(backend string, offline, watch bool) bool
}{
	"kubeconfig":                   {"--caller-backend tokenreview", func(b string, _, _ bool) bool { return b == BackendTokenReview }},
	"caller-issuer":                {"--caller-backend tokenreview", func(b string, _, _ bool) bool { return b == BackendTokenReview }},
	"caller-review-qps":            {"--caller-backend tokenreview", func(b string, _, _ bool) bool { return b == BackendTokenReview }},
	"caller-review-burst":          {"--caller-backend tokenreview", func(b string, _, _ bool) bool { return b == BackendTokenReview }},
	"caller-review-interval":       {"--caller-backend tokenreview", func(b string, _, _ bool) bool { return b == BackendTokenReview }},
	"caller-watch-bound-objects":   {"--caller-backend tokenreview", func(b string, _, _ bool) bool { return b == BackendTokenReview }},
	"caller-watch-max-break":       {"--caller-watch-bound-objects", func(b string, _, w bool) bool { return b == BackendTokenReview && w }},
	"caller-keys-max-stale":        {"offline verification: --caller-backend oidc, --caller-review-interval or --caller-watch-bound-objects", func(b string, o, _ bool) bool { return b == BackendOIDC || o }},
	"caller-authentication-config": {"--caller-backend oidc", func(b string, _, _ bool) bool { return b == BackendOIDC }},
}

// CheckAuthFlags refuses, at start-up, every caller-authentication flag
// given on the command line that the settings chosen never read, naming
// the flag and what reads it (--caller-review-qps with --caller-backend
// oidc, say): no flag does nothing. serve.Command runs it before a
// service is built.
func CheckAuthFlags(f *pflag.FlagSet) error {
	backendFlag := f.Lookup("caller-backend")
	if backendFlag == nil {
		return nil
	}
	backend := backendFlag.Value.String()
	wb := f.Lookup("caller-watch-bound-objects")
	watch := wb != nil && wb.Value.String() == "true"
	offline := watch
	if ri := f.Lookup("caller-review-interval"); ri != nil {
		if d, err := time.ParseDuration(ri.Value.String()); err == nil && d > 0 {
			offline = true
		}
	}
	var errs []error
	f.Visit(func(fl *pflag.Flag) {
		if r, ok := readBy[fl.Name]; ok && !r.read(backend, offline, watch) {
			errs = append(errs, fmt.Errorf("serve: --%s is read only with %s; with --caller-backend %s as set it would do nothing", fl.Name, r.when, backend))
		}
	})
	return errors.Join(errs...)
}

// settings are the effective caller-authentication settings, for the
// start-up line.
func (a AuthOptions) settings() []any {
	a.Defaults()
	kv := []any{"caller_backend", a.Backend, "caller_cache_ttl", max(a.CacheTTL, 0).String(), "caller_review_timeout", a.ReviewTimeout.String()}
	if a.Backend == BackendOIDC {
		return append(kv, "caller_authentication_config", a.AuthenticationConfig)
	}
	return append(kv, "caller_issuers", a.Issuers, "caller_review_interval", a.ReviewInterval.String(), "caller_watch_bound_objects", a.WatchBoundObjects,
		"caller_review_qps", a.ReviewQPS)
}

// Zero in a caller-authentication duration flag means one thing: off,
// where the setting can be off — --caller-cache-ttl and
// --caller-negative-cache-ttl (nothing reused), --caller-review-interval
// (no periodic review) — and it is refused where it cannot be:
// --caller-review-timeout, --caller-watch-max-break, --caller-keys-max-stale
// ("want a positive duration"). A negative duration is always refused.
// (In AuthOptions itself, zero stays "the default", for code that fills it
// in: an off flag stores a negative duration.)

// offDuration is a duration flag whose 0 means off: stored as negative, so
// that the zero value of AuthOptions keeps meaning the default.
type offDuration time.Duration

func (c *offDuration) String() string {
	if *c < 0 {
		return "0s"
	}
	return time.Duration(*c).String()
}

func (c *offDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return err
	case d < 0:
		return fmt.Errorf("%s: want zero (off) or more", v)
	case d == 0:
		d = -1
	}
	*c = offDuration(d)
	return nil
}

func (c *offDuration) Type() string { return "duration" }

// positiveDuration is a duration flag that cannot be off: zero and
// negative are refused.
type positiveDuration time.Duration

func (p *positiveDuration) String() string { return time.Duration(*p).String() }

func (p *positiveDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return err
	case d <= 0:
		return fmt.Errorf("%s: want a positive duration (this setting cannot be off)", v)
	}
	*p = positiveDuration(d)
	return nil
}

func (p *positiveDuration) Type() string { return "duration" }

// Validate refuses settings that cannot be honoured, naming the flag.
func (a AuthOptions) Validate() error {
	var errs []error
	switch a.Backend {
	case BackendTokenReview, "":
		if a.AuthenticationConfig != "" {
			errs = append(errs, errors.New("serve: --caller-authentication-config belongs to --caller-backend oidc"))
		}
		for _, iss := range a.Issuers {
			if !strings.HasPrefix(iss, "https://") {
				errs = append(errs, fmt.Errorf("serve: --caller-issuer %q: want the https:// issuer of the API server's service-account tokens", iss))
			}
		}
	case BackendOIDC:
		if a.AuthenticationConfig == "" {
			errs = append(errs, errors.New("serve: --caller-backend oidc needs --caller-authentication-config"))
		}
		if a.Kubeconfig != "" {
			errs = append(errs, errors.New("serve: --kubeconfig belongs to --caller-backend tokenreview"))
		}
		if len(a.Issuers) > 0 {
			errs = append(errs, errors.New("serve: --caller-issuer belongs to --caller-backend tokenreview (the oidc backend's issuers are in --caller-authentication-config)"))
		}
	default:
		errs = append(errs, fmt.Errorf("serve: --caller-backend %q: want tokenreview or oidc", a.Backend))
	}
	if a.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("serve: --caller-max-in-flight %d: want a positive number", a.MaxInFlight))
	}
	if a.ReviewQPS < 0 {
		errs = append(errs, fmt.Errorf("serve: --caller-review-qps %g: want a positive number", a.ReviewQPS))
	}
	if a.ReviewBurst < 0 {
		errs = append(errs, fmt.Errorf("serve: --caller-review-burst %d: want a positive number", a.ReviewBurst))
	}
	if a.CacheMaxEntries < 0 {
		errs = append(errs, fmt.Errorf("serve: --caller-cache-max-entries %d: want a positive number", a.CacheMaxEntries))
	}
	if a.ReviewInterval < 0 {
		errs = append(errs, fmt.Errorf("serve: --caller-review-interval %s: want zero (off) or a positive duration", a.ReviewInterval))
	}
	if a.ReviewInterval > 0 && a.Backend == BackendOIDC {
		errs = append(errs, errors.New("serve: --caller-review-interval belongs to --caller-backend tokenreview"))
	}
	if a.WatchBoundObjects && a.Backend == BackendOIDC {
		errs = append(errs, errors.New("serve: --caller-watch-bound-objects belongs to --caller-backend tokenreview"))
	}
	if a.WatchMaxBreak != 0 && a.WatchMaxBreak < kube.MinMaxWatchBreak {
		errs = append(errs, fmt.Errorf("serve: --caller-watch-max-break %s: want %s or more (a proof through the API server takes up to 6 s)", a.WatchMaxBreak, kube.MinMaxWatchBreak))
	}
	if a.KeysMaxStale < 0 {
		errs = append(errs, fmt.Errorf("serve: --caller-keys-max-stale %s: want a positive duration", a.KeysMaxStale))
	}
	if a.ReviewTimeout < 0 {
		errs = append(errs, fmt.Errorf("serve: --caller-review-timeout %s: want a positive duration", a.ReviewTimeout))
	}
	return errors.Join(errs...)
}

// VerifiedBy names the backend in records and logs: "TokenReview" or
// "OIDC".
func (a AuthOptions) VerifiedBy() string {
	if a.Backend == BackendOIDC {
		return "OIDC"
	}
	return "TokenReview"
}

// GuardSpec is what a service decides about its callers.
type GuardSpec struct {
	// Audience the tokens must be minted for (TokenReview); the oidc
	// backend takes the audiences from its issuers file.
	Audience string
	// Mode, FailOpenOnUnavailable and Rule are the guard's.
	Mode                  guard.Mode
	FailOpenOnUnavailable bool
	Rule                  binding.Rule
	// Metrics: the registry and the name prefix. The reasons the
	// violations counter starts at zero for are the rule's
	// (binding.Reasons); a rule's own series (node binding's) are
	// registered with the rule.
	Registry      prometheus.Registerer
	MetricsPrefix string
	Logger        *slog.Logger
	// WatchNode narrows --caller-watch-bound-objects' pod watch to the pods
	// of one node: a node agent's callers run there (tokens bound to pods
	// elsewhere are reviewed). Empty: every pod.
	WatchNode string
	// Authenticator replaces the backend, for tests. It is still cached.
	Authenticator authn.Authenticator
}

// CallerAuth is a service's wired caller authentication: the guard, and
// what must run beside it for as long as the service does.
type CallerAuth struct {
	*guard.Guard
	background []Runnable
}

// Runnables are what the service must run with its servers: the
// bound-object watches under --caller-watch-bound-objects, else nothing.
// A nil CallerAuth (a service without caller authentication) has none.
func (c *CallerAuth) Runnables() []Runnable {
	if c == nil {
		return nil
	}
	return c.background
}

// Guard builds the cached authenticator, the metrics and the guard: the
// one place a service's caller authentication is wired.
func (a AuthOptions) Guard(spec GuardSpec) (*CallerAuth, error) {
	a.Defaults()
	auth := spec.Authenticator
	var background []Runnable
	if auth == nil {
		var err error
		if auth, background, err = a.backend(spec.Audience, spec.WatchNode, spec.Logger); err != nil {
			return nil, err
		}
	}
	m, err := guard.NewMetrics(spec.Registry, guard.MetricsConfig{Prefix: spec.MetricsPrefix, Reasons: binding.Reasons(spec.Rule), Mode: spec.Mode})
	if err != nil {
		return nil, err
	}
	cache := authn.NewCache(auth, authn.CacheConfig{TTL: a.CacheTTL, NegativeTTL: a.NegativeCacheTTL, MaxInFlight: a.MaxInFlight, MaxEntries: a.CacheMaxEntries})
	if err := registerMetrics(spec.Registry, spec.MetricsPrefix, cache, auth); err != nil {
		return nil, err
	}
	g, err := guard.New(guard.Config{
		Mode: spec.Mode, FailOpenOnUnavailable: spec.FailOpenOnUnavailable,
		Authenticator: cache, Rule: spec.Rule, Metrics: m, Logger: spec.Logger,
	})
	if err != nil {
		return nil, err
	}
	return &CallerAuth{Guard: g, background: background}, nil
}

func (a AuthOptions) backend(audience, watchNode string, log *slog.Logger) (authn.Authenticator, []Runnable, error) {
	if a.Backend == BackendOIDC {
		r, err := oidc.NewReloading(oidc.ReloadingConfig{Path: a.AuthenticationConfig, Check: a.CheckIssuers, Logger: log,
			Base: oidc.Config{Timeout: a.ReviewTimeout, MaxStaleKeys: a.KeysMaxStale, Logger: log}})
		if err != nil {
			return nil, nil, fmt.Errorf("serve: --caller-authentication-config: %w", err)
		}
		return r, []Runnable{Named("authentication configuration reload", r)}, nil
	}
	if audience == "" {
		return nil, nil, errors.New("serve: TokenReview needs an audience: a token minted for another service must not be accepted")
	}
	kcfg := kube.Config{Kubeconfig: a.Kubeconfig, Audiences: []string{audience}, Timeout: a.ReviewTimeout, Issuers: a.Issuers,
		QPS: float32(a.ReviewQPS), Burst: a.ReviewBurst, MaxStaleKeys: a.KeysMaxStale, Logger: log}
	k, err := kube.New(kcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: TokenReview: %w", err)
	}
	if a.ReviewInterval <= 0 && !a.WatchBoundObjects {
		return k, nil, nil
	}
	offline, err := kube.Offline(kcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: offline verification: %w", err)
	}
	var (
		first      authn.Authenticator = offline
		background []Runnable
	)
	if a.WatchBoundObjects {
		md, err := kube.MetadataClient(kcfg)
		if err != nil {
			return nil, nil, fmt.Errorf("serve: --caller-watch-bound-objects: %w", err)
		}
		b, err := kube.NewBound(kube.BoundConfig{Metadata: md, Offline: offline, Review: k, NodeName: watchNode, MaxWatchBreak: a.WatchMaxBreak})
		if err != nil {
			return nil, nil, fmt.Errorf("serve: --caller-watch-bound-objects: %w", err)
		}
		first, background = b, []Runnable{Named("bound-object watches", b)}
		if a.ReviewInterval <= 0 {
			return b, background, nil
		}
	}
	// Credentials outnumber cached verdicts: a rotated token's review
	// stands until its interval lapses.
	r, err := authn.NewRecheck(authn.RecheckConfig{Offline: first, Review: k, Interval: a.ReviewInterval, MaxEntries: 10 * a.CacheMaxEntries})
	return r, background, err
}

// collecting is a layer of caller authentication that exports its own
// metrics: the verdict cache, the Recheck of --caller-review-interval, the
// bound-object view of --caller-watch-bound-objects and the offline
// verifier's key sets.
type collecting interface {
	Collectors(prefix string) []prometheus.Collector
}

// registerMetrics registers the cache's collectors and those of the
// backend's layers the service runs, each layer reached through the one
// in front of it.
func registerMetrics(reg prometheus.Registerer, prefix string, cache *authn.Cache, auth authn.Authenticator) error {
	layers := []any{cache}
	for auth != nil {
		layers = append(layers, auth)
		inner, ok := auth.(interface{ OfflineVerifier() authn.Authenticator })
		if !ok {
			break
		}
		auth = inner.OfflineVerifier()
	}
	for _, l := range layers {
		c, ok := l.(collecting)
		if !ok {
			continue
		}
		for _, col := range c.Collectors(prefix) {
			if err := reg.Register(col); err != nil {
				return fmt.Errorf("serve: registering the caller-authentication metrics: %w", err)
			}
		}
	}
	return nil
}
