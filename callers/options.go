// Package callers builds a service's caller authentication from its
// command line, the one way every callerauth service does: the backend
// (TokenReview, offline with a periodic review or the bound-object watch,
// or an AuthenticationConfiguration's issuers), the verdict cache in
// front of it, their metrics and the guard.
//
// It follows k8s.io/apiserver's options: [NewOptions] holds the defaults,
// [Options.AddFlags] registers them as flags, [Options.Complete] validates
// and returns a [Config] in which everything is parsed — the service's
// own settings (audience, mode, fail-open) with the backend's — and [New]
// turns a Config and the service's name and rule ([Service]) into a
// [Stack]: the guard, and the authenticator, collectors and runnables it
// is made of, returned explicitly for the service to register and run:
//
//	o := callers.NewOptions()
//	o.Audience = "my-service" // the default of --caller-audience
//	o.AddServiceFlags(flags)
//	o.AddFlags(flags)
//	// flags parsed
//	cfg, err := o.Complete()
//	st, err := callers.New(cfg, callers.Service{Name: "my_service", Rule: rule, Registry: reg})
//	// run st.Runnables beside the servers; st.Guard guards them.
//
// A program with an authenticator of its own (another validator, or a
// test's) gets the same cache, metrics and guard with [Custom].
//
// The layers under the guard are composed explicitly: each is an
// authn.Layer — the authenticator with what it states of itself (the
// audiences its verdicts depend on, its revocations, the facts it never
// states) — built by its backend's Layer() and handed on as such, to the
// next layer (authn.NewRecheck, kube.NewBound), to the verdict cache and
// to the guard. Nothing finds out what a layer can do by asserting its
// type. Adding a layer is one step in built.backend (stack.go): build it
// from the layer below, make its Layer() the new top, add its
// collectors and what it must run.
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
	"github.com/callerauth/callerauth/guard"
)

// noAuthConfig is the refusal of --caller-backend oidc by a build
// without the AuthenticationConfiguration reader (AuthConfigBuilt).
const noAuthConfig = "--caller-backend oidc: this binary was built without the AuthenticationConfiguration reader (go build -tags callerauth_noauthconfig: TokenReview only); use a build without that tag, such as the released image"

// Caller-authentication backends (--caller-backend).
const (
	// BackendTokenReview asks the Kubernetes API server (authn/kube): it
	// sees revocation (a deleted pod's token).
	BackendTokenReview = "tokenreview"
	// BackendOIDC verifies offline against each trusted issuer's JWKS
	// (authn/oidc): one issuer per tenant.
	BackendOIDC = "oidc"
)

// Options are every caller setting of a service: the service's own —
// the audience its callers' tokens are minted for, the mode its guard
// judges in, fail-open, the node it watches, its requirement of the
// issuers — and the backend's, as the flags give them. A service that
// takes its own from the command line registers them with
// [Options.AddServiceFlags] (the pdp, the proxy); one that takes them
// from a file of its own sets them before Complete (the connector's
// config.json); the rest is the same everywhere ([Options.AddFlags]).
// Nothing about callers is set after Complete: [New] reads the [Config]
// and the service's name and rule, nothing else.
//
// Start from [NewOptions]: it holds every default, and no other place
// does. A zero duration means one thing: off, where the setting can be
// off (CacheTTL, NegativeCacheTTL, ReviewInterval), and it is refused by
// [Options.Validate] where it cannot be (ReviewTimeout, WatchMaxBreak,
// KeysMaxStale). A zero count is refused. A negative value always is.
//
//	o := callers.NewOptions()
//	o.Audience = "my-service"
//	o.AddServiceFlags(cmd.Flags()) // --caller-audience, --caller-auth-mode
//	o.AddFlags(cmd.Flags())        // --caller-backend, --kubeconfig, --caller-cache-ttl, ...
//	// after parsing:
//	cfg, err := o.Complete() // every problem at once; a flag the backend never reads refused
//	st, err := callers.New(cfg, callers.Service{Name: "my_service", Rule: rule, Registry: prometheus.DefaultRegisterer})
//	// st.Guard guards; run st.Runnables for as long as it serves.
type Options struct {
	// Audience callers' tokens must be minted for, on every backend
	// (--caller-audience): the TokenReview's audience; under oidc a token
	// must carry it as well as satisfy the AuthenticationConfiguration,
	// and a file none of whose issuers lists it is refused (at start-up
	// and at every reload). Required, unless Mode is off or AnyAudience
	// holds under oidc.
	Audience string
	// AnyAudience lets an empty Audience mean, under oidc, any audience
	// the AuthenticationConfiguration lists (the vmafx controller: one per
	// tenant's issuer). TokenReview always needs one.
	AnyAudience bool
	// Mode is how the guard judges (--caller-auth-mode): ModeEnforce,
	// ModeAudit (ModeWarn is its other name, the pdp's), or ModeOff — no
	// caller is authenticated — which only AllowOff permits.
	Mode string
	// CanBeOff says the service may run with Mode off: AddServiceFlags
	// registers --insecure-caller-auth-off (the pdp); the connector's
	// enableNodeBindingAuth: false. Otherwise off is refused.
	CanBeOff bool
	// AllowOff permits Mode off where CanBeOff: the pdp's
	// --insecure-caller-auth-off, the connector's enableNodeBindingAuth:
	// false.
	AllowOff bool
	// FailOpenOnUnavailable is the guard's: a request whose verification
	// failed because the validator could not be reached or did not answer
	// in time goes on as a degraded subject.
	FailOpenOnUnavailable bool
	// WatchNode narrows --caller-watch-bound-objects' pod watch to the pods
	// of one node: a node agent's callers run there (tokens bound to pods
	// elsewhere are reviewed). Empty: every pod.
	WatchNode string
	// CheckIssuers is the service's own requirement of the oidc backend's
	// issuers, at start-up and at every reload (the vmafx controller: one
	// constant tenant per issuer). Optional.
	CheckIssuers func(oidc.Config) error

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

// The modes of --caller-auth-mode.
const (
	// ModeEnforce refuses a request the rule or the authentication refuses.
	ModeEnforce = string(guard.Enforce)
	// ModeAudit judges every request as enforce would, logs and counts each
	// refusal, and lets the request through.
	ModeAudit = string(guard.Audit)
	// ModeWarn is ModeAudit by the pdp's name for it (seed 002).
	ModeWarn = "warn"
	// ModeOff authenticates no caller; only Options.AllowOff permits it.
	ModeOff = "off"
)

// NewOptions returns the defaults: enforce, no audience (a service names
// its own), TokenReview, the library's cache, timeout, rate and key
// bounds, no periodic review, no watch.
func NewOptions() Options {
	return Options{
		Mode:             ModeEnforce,
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

// AddServiceFlags registers the settings of a service whose callers are
// set on its command line: --caller-audience and --caller-auth-mode, and,
// where the service CanBeOff, --insecure-caller-auth-off, without which
// --caller-auth-mode off is refused. Every service registers AddFlags too.
func (o *Options) AddServiceFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Audience, "caller-audience", o.Audience, "the audience callers' tokens must be minted for: a token minted for another service is refused (on every --caller-backend)")
	modes := "enforce, or audit (also called warn): refusals are logged and counted but let through"
	if o.CanBeOff {
		modes += "; or off (with --insecure-caller-auth-off): callers are not authenticated at all"
		f.BoolVar(&o.AllowOff, "insecure-caller-auth-off", o.AllowOff, "allow --caller-auth-mode off: callers are not authenticated at all")
	}
	f.StringVar(&o.Mode, "caller-auth-mode", o.Mode, modes)
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
// returns the completed configuration [New] reads, with nothing left
// to parse or default.
func (o Options) Complete() (Config, error) {
	var errs []error
	refused := map[string]bool{} // flags already named in an error
	bad := func(flag, format string, a ...any) {
		refused[flag] = true
		errs = append(errs, fmt.Errorf("caller authentication: "+format, a...))
	}
	mode, err := o.mode()
	if err != nil {
		bad("caller-auth-mode", "%v", err)
	}
	anyAudience := o.AnyAudience && o.Backend == BackendOIDC // the file's audiences
	if o.Audience == "" && mode != ModeOff && !anyAudience {
		bad("caller-audience", "--caller-audience is required: a token minted for another service must not be accepted")
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
		if !AuthConfigBuilt {
			bad("caller-backend", noAuthConfig)
		}
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
	return Config{o: o, mode: mode}, nil
}

// mode reads Mode: ModeEnforce, ModeAudit (for ModeWarn too) or ModeOff.
func (o Options) mode() (string, error) {
	switch o.Mode {
	case ModeWarn:
		return ModeAudit, nil
	case ModeOff:
		switch {
		case o.CanBeOff && o.AllowOff:
			return ModeOff, nil
		case o.CanBeOff:
			return "", errors.New("--caller-auth-mode off needs --insecure-caller-auth-off: without it anyone who reaches the service is answered without being authenticated")
		}
		return "", errors.New("--caller-auth-mode off: this service always authenticates its callers; want enforce or audit")
	}
	m, err := guard.ParseMode(o.Mode)
	if err != nil {
		return "", fmt.Errorf("--caller-auth-mode %q: want enforce, audit (or warn)", o.Mode)
	}
	return string(m), nil
}
