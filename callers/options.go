// Package callers builds a service's caller authentication from its
// command line, the one way every callerauth service does: the backend
// (TokenReview, offline with a periodic review or the bound-object watch,
// or an AuthenticationConfiguration's issuers), the verdict cache in
// front of it, their metrics and the guard.
//
// It follows k8s.io/apiserver's options: [NewOptions] holds the defaults,
// [Options.AddFlags] registers them as flags, [Options.Complete] validates
// and returns a [Config] in which everything is parsed, and [Build] turns
// a Config and a service's [Spec] into a [Stack] — the guard, and the
// authenticator, collectors and runnables it is made of, returned
// explicitly for the service to register and run:
//
//	o := callers.NewOptions()
//	o.AddFlags(flags)
//	// flags parsed
//	cfg, err := o.Complete()
//	st, err := callers.Build(cfg, callers.Spec{Audience: "my-service", Mode: guard.Enforce, Rule: rule, Registry: reg, MetricsPrefix: "my_service"})
//	// run st.Runnables beside the servers; st.Guard guards them.
//
// A program with an authenticator of its own (another validator, or a
// test's) gets the same cache, metrics and guard with [Custom].
package callers

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/authn/oidc"
)

// Caller-authentication backends (--caller-backend).
const (
	// BackendTokenReview asks the Kubernetes API server (authn/kube): it
	// sees revocation (a deleted pod's token).
	BackendTokenReview = "tokenreview"
	// BackendOIDC verifies offline against each trusted issuer's JWKS
	// (authn/oidc): one issuer per tenant.
	BackendOIDC = "oidc"
)

// Options are the caller-authentication settings every service shares,
// as the flags give them. What a service decides for itself — the
// audience, the mode, fail-open, the rule — goes in [Spec].
//
// Start from [NewOptions]: it holds every default, and no other place
// does. A zero duration means one thing: off, where the setting can be
// off (CacheTTL, NegativeCacheTTL, ReviewInterval), and it is refused by
// [Options.Validate] where it cannot be (ReviewTimeout, WatchMaxBreak,
// KeysMaxStale). A zero count is refused. A negative value always is.
//
//	o := callers.NewOptions()
//	o.AddFlags(cmd.Flags()) // --caller-backend, --kubeconfig, --caller-cache-ttl, ...
//	// after parsing:
//	cfg, err := o.Complete() // every problem at once; a flag the backend never reads refused
//	st, err := callers.Build(cfg, callers.Spec{Audience: "my-service", Mode: guard.Enforce, Rule: rule,
//		Registry: prometheus.DefaultRegisterer, MetricsPrefix: "my_service"})
//	// st.Guard guards; run st.Runnables for as long as it serves.
type Options struct {
	// Backend is BackendTokenReview or BackendOIDC.
	Backend string
	// Kubeconfig is TokenReview's client; empty: in-cluster.
	Kubeconfig string
	// Issuers are the API server's service-account issuers: tokens that are
	// not JWTs of one of them are refused without a TokenReview. Empty:
	// every token is reviewed.
	Issuers []string
	// AuthenticationConfig is the oidc backend's Kubernetes
	// AuthenticationConfiguration file (the one an API server's
	// --authentication-config reads), followed on change.
	AuthenticationConfig string
	// CacheTTL is how long a successful verification is reused; zero: none
	// is, every request is verified.
	CacheTTL time.Duration
	// NegativeCacheTTL is how long a token_invalid verdict is reused; zero:
	// none is.
	NegativeCacheTTL time.Duration
	// MaxInFlight bounds the verifications running at once.
	MaxInFlight int
	// CacheMaxEntries bounds the verdict cache.
	CacheMaxEntries int
	// ReviewTimeout bounds one verification, retries included.
	ReviewTimeout time.Duration
	// ReviewQPS and ReviewBurst bound the TokenReviews sent per second.
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
	// — in metadata watches instead of a TokenReview (kube.Bound).
	WatchBoundObjects bool
	// WatchMaxBreak is the longest the bound-object view answers after it
	// was last proven current (kube.BoundConfig.MaxWatchBreak); at least
	// kube.MinMaxWatchBreak.
	WatchMaxBreak time.Duration
	// KeysMaxStale bounds how long cached signing keys are trusted while
	// every JWKS fetch fails (oidc.Config.MaxStaleKeys).
	KeysMaxStale time.Duration

	// changed says whether a flag was given on the command line, once
	// AddFlags registered the flags: Validate refuses one the settings
	// chosen never read.
	changed func(name string) bool
}

// NewOptions returns the defaults: TokenReview, the library's cache,
// timeout, rate and key bounds, no periodic review, no watch.
func NewOptions() Options {
	return Options{
		Backend:          BackendTokenReview,
		CacheTTL:         authn.DefaultCacheTTL,
		NegativeCacheTTL: authn.DefaultCacheNegativeTTL,
		MaxInFlight:      authn.DefaultCacheMaxInFlight,
		CacheMaxEntries:  authn.DefaultCacheMaxEntries,
		ReviewTimeout:    kube.DefaultTimeout,
		ReviewQPS:        kube.DefaultQPS,
		ReviewBurst:      kube.DefaultBurst,
		WatchMaxBreak:    kube.DefaultMaxWatchBreak,
		KeysMaxStale:     oidc.DefaultMaxStaleKeys,
	}
}

// AddFlags registers every caller-authentication flag with o's values as
// their defaults. Every service registers the whole set; Validate refuses
// one given on the command line that the backend chosen never reads.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Backend, "caller-backend", o.Backend, "how callers' tokens are verified: tokenreview (the Kubernetes API server) or oidc (offline, against the issuers of --caller-authentication-config)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "tokenreview: kubeconfig of the API server that reviews tokens (default: in-cluster)")
	f.StringArrayVar(&o.Issuers, "caller-issuer", o.Issuers, "tokenreview: the API server's service-account issuer (repeatable); other tokens are refused without a review")
	f.StringVar(&o.AuthenticationConfig, "caller-authentication-config", o.AuthenticationConfig, "oidc: the trusted issuers, a Kubernetes AuthenticationConfiguration file (apiserver.config.k8s.io/v1, the file an API server's --authentication-config reads): issuers, audiences, CEL claim validation rules, claim mappings and user validation rules; the tenant and roles are the extra keys callerauth.dev/tenant and callerauth.dev/roles. Reloaded on change; a file that does not load is refused and the last good one stays")
	f.DurationVar(&o.CacheTTL, "caller-cache-ttl", o.CacheTTL, "how long a successful verification is reused (bounds how long a revoked token may still work); 0: not reused, every request is verified")
	f.DurationVar(&o.NegativeCacheTTL, "caller-negative-cache-ttl", o.NegativeCacheTTL, "how long a token_invalid verdict is reused, so a repeated bad token costs one verification per period; 0: not reused")
	f.IntVar(&o.MaxInFlight, "caller-max-in-flight", o.MaxInFlight, "verifications running at once; beyond, a request fails as validator_unavailable (cached callers are unaffected)")
	f.IntVar(&o.CacheMaxEntries, "caller-cache-max-entries", o.CacheMaxEntries, "verdicts the cache holds (successes and refusals); full, the least recently used verdict of the issuer holding the most is evicted (refusals count as one issuer), so no issuer is pushed below entries / active issuers")
	f.DurationVar(&o.ReviewTimeout, "caller-review-timeout", o.ReviewTimeout, "how long one verification may take, retries included (a TokenReview, or an issuer's discovery and JWKS fetch)")
	f.Float64Var(&o.ReviewQPS, "caller-review-qps", o.ReviewQPS, "tokenreview: TokenReviews sent per second at most; a request that would wait past --caller-review-timeout fails as validator_unavailable")
	f.IntVar(&o.ReviewBurst, "caller-review-burst", o.ReviewBurst, "tokenreview: TokenReviews that may be sent at once above --caller-review-qps")
	f.DurationVar(&o.ReviewInterval, "caller-review-interval", o.ReviewInterval, "tokenreview: verify tokens offline against the API server's JWKS and review each credential only when first seen and once per this interval: the longest a deleted pod's token is still accepted (0: review on every cache miss; without --caller-issuer, the issuer is read from the API server's discovery document at start-up)")
	f.BoolVar(&o.WatchBoundObjects, "caller-watch-bound-objects", o.WatchBoundObjects, "tokenreview: verify tokens offline against the API server's JWKS and check the service account and pod each is bound to in a metadata watch instead of a TokenReview; a deleted pod's token is refused within seconds. Other tokens, and all while the watch is unsynced or broken past --caller-watch-max-break, are reviewed; with --caller-review-interval, each credential is also reviewed when first seen and once per interval (needs RBAC to list and watch pods and serviceaccounts; without --caller-issuer, the issuer is read from the API server's discovery document at start-up)")
	f.DurationVar(&o.WatchMaxBreak, "caller-watch-max-break", o.WatchMaxBreak, "--caller-watch-bound-objects: the longest the view answers after it was last proven current through the API server (a consistent list of one object every (bound - 2s)/2, each watch opened with that server-side timeout, so that the API server's bookmark before the deadline completes the proof); a failed watch or proof stops it at once; while it is stopped every token is reviewed, and a cached verdict stands for at most this long (at least 8s)")
	f.DurationVar(&o.KeysMaxStale, "caller-keys-max-stale", o.KeysMaxStale, "offline verification (oidc, --caller-review-interval, --caller-watch-bound-objects): how long the last fetched signing keys are still trusted while every JWKS fetch fails; past it, validator_unavailable")
	o.changed = f.Changed
}

// readBy says, for each flag only some settings read, what reads it.
var readBy = map[string]struct {
	when string
	read func(o Options) bool
}{
	"kubeconfig":                   {"--caller-backend tokenreview", Options.tokenReview},
	"caller-issuer":                {"--caller-backend tokenreview", Options.tokenReview},
	"caller-review-qps":            {"--caller-backend tokenreview", Options.tokenReview},
	"caller-review-burst":          {"--caller-backend tokenreview", Options.tokenReview},
	"caller-review-interval":       {"--caller-backend tokenreview", Options.tokenReview},
	"caller-watch-bound-objects":   {"--caller-backend tokenreview", Options.tokenReview},
	"caller-watch-max-break":       {"--caller-watch-bound-objects", func(o Options) bool { return o.tokenReview() && o.WatchBoundObjects }},
	"caller-keys-max-stale":        {"offline verification: --caller-backend oidc, --caller-review-interval or --caller-watch-bound-objects", Options.offline},
	"caller-authentication-config": {"--caller-backend oidc", func(o Options) bool { return o.Backend == BackendOIDC }},
}

func (o Options) tokenReview() bool { return o.Backend == BackendTokenReview }

// offline says whether tokens are verified against JWKS by this process.
func (o Options) offline() bool {
	return o.Backend == BackendOIDC || (o.tokenReview() && (o.ReviewInterval > 0 || o.WatchBoundObjects))
}

// Validate refuses settings that cannot be honoured: what
// [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
}

// Complete refuses settings that cannot be honoured, naming the flag,
// and — once AddFlags registered the flags — every flag given on the
// command line that the settings chosen never read (--caller-review-qps
// with --caller-backend oidc, say): no flag does nothing. Otherwise it
// returns the completed configuration [Build] reads, with nothing left
// to parse or default.
func (o Options) Complete() (Config, error) {
	var errs []error
	refused := map[string]bool{} // flags already named in an error
	bad := func(flag, format string, a ...any) {
		refused[flag] = true
		errs = append(errs, fmt.Errorf("caller authentication: "+format, a...))
	}
	switch o.Backend {
	case BackendTokenReview:
		if o.AuthenticationConfig != "" {
			bad("caller-authentication-config", "--caller-authentication-config belongs to --caller-backend oidc")
		}
		for _, iss := range o.Issuers {
			if !strings.HasPrefix(iss, "https://") {
				bad("caller-issuer", "--caller-issuer %q: want the https:// issuer of the API server's service-account tokens", iss)
			}
		}
	case BackendOIDC:
		if o.AuthenticationConfig == "" {
			bad("caller-backend", "--caller-backend oidc needs --caller-authentication-config")
		}
		if o.Kubeconfig != "" {
			bad("kubeconfig", "--kubeconfig belongs to --caller-backend tokenreview")
		}
		if len(o.Issuers) > 0 {
			bad("caller-issuer", "--caller-issuer belongs to --caller-backend tokenreview (the oidc backend's issuers are in --caller-authentication-config)")
		}
		if o.ReviewInterval > 0 {
			bad("caller-review-interval", "--caller-review-interval belongs to --caller-backend tokenreview")
		}
		if o.WatchBoundObjects {
			bad("caller-watch-bound-objects", "--caller-watch-bound-objects belongs to --caller-backend tokenreview")
		}
	default:
		bad("caller-backend", "--caller-backend %q: want tokenreview or oidc", o.Backend)
	}
	for _, c := range []struct {
		flag string
		n    float64
	}{{"caller-max-in-flight", float64(o.MaxInFlight)}, {"caller-cache-max-entries", float64(o.CacheMaxEntries)}, {"caller-review-qps", o.ReviewQPS}, {"caller-review-burst", float64(o.ReviewBurst)}} {
		if c.n <= 0 {
			bad(c.flag, "--%s %g: want a positive number", c.flag, c.n)
		}
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
		off  bool
	}{{"caller-cache-ttl", o.CacheTTL, true}, {"caller-negative-cache-ttl", o.NegativeCacheTTL, true}, {"caller-review-interval", o.ReviewInterval, true},
		{"caller-review-timeout", o.ReviewTimeout, false}, {"caller-watch-max-break", o.WatchMaxBreak, false}, {"caller-keys-max-stale", o.KeysMaxStale, false}} {
		switch {
		case d.off && d.d < 0:
			bad(d.flag, "--%s %s: want zero (off) or a positive duration", d.flag, d.d)
		case !d.off && d.d <= 0:
			bad(d.flag, "--%s %s: want a positive duration (this setting cannot be off)", d.flag, d.d)
		}
	}
	if o.WatchMaxBreak > 0 && o.WatchMaxBreak < kube.MinMaxWatchBreak {
		bad("caller-watch-max-break", "--caller-watch-max-break %s: want %s or more (a proof through the API server takes up to 6 s)", o.WatchMaxBreak, kube.MinMaxWatchBreak)
	}
	if o.changed != nil {
		for _, name := range slices.Sorted(maps.Keys(readBy)) { // a fixed order, for stable errors
			if r := readBy[name]; o.changed(name) && !r.read(o) && !refused[name] {
				bad(name, "--%s is read only with %s; with --caller-backend %s as set it would do nothing", name, r.when, o.Backend)
			}
		}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	o.changed = nil
	o.Issuers = append([]string(nil), o.Issuers...)
	return Config{o: o}, nil
}
