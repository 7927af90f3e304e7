package proxy

// The proxy's options: its flags, what Complete refuses, and the
// configuration New reads.

import (
	"cmp"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/textproto"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/foundation/fsutil"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
)

// Options are the proxy's flags. Start from [NewOptions], which holds
// every default; [Options.Complete] validates them and returns the
// [Config] that [New] reads.
type Options struct {
	// Serve: --listen, --tls-cert-file, --tls-key-file, --metrics-listen,
	// --log-level, --shutdown-timeout and the --http-* limits.
	Serve serve.Options
	// Callers: --caller-audience (required: a token for another service
	// is refused), --caller-auth-mode, --caller-backend, --kubeconfig,
	// --caller-cache-ttl and the rest of the caller authentication.
	Callers callers.Options
	// Upstream is where allowed requests go (--upstream): http://,
	// https:// or unix:///path.
	Upstream string
	// UpstreamCAFile verifies an https:// upstream (--upstream-ca-file);
	// empty: the system roots.
	UpstreamCAFile string
	// UpstreamHTTP2 speaks HTTP/2 to the upstream (--upstream-http2): with
	// prior knowledge over plain TCP or a Unix socket, by ALPN over TLS.
	// A gRPC upstream needs it.
	UpstreamHTTP2 bool
	// UpstreamHeaderTimeout bounds the wait for the upstream's response
	// headers (--upstream-header-timeout); the body then streams.
	UpstreamHeaderTimeout time.Duration
	// AllowServiceAccounts, AllowGroups and AllowUsers name the callers
	// let through (--allow-service-account, --allow-group, --allow-user);
	// at least one is required.
	AllowServiceAccounts, AllowGroups, AllowUsers []string
	// AllowPaths, when set, are the only paths served (path.Match
	// patterns, --allow-paths); any other is 404 before authentication.
	AllowPaths []string
	// IgnorePaths are passed to the upstream without authentication
	// (--ignore-paths): a health probe's. Exclusive with AllowPaths.
	IgnorePaths []string
	// UserHeader, GroupHeader and ExtraHeaderPrefix carry the caller's
	// identity to the upstream (--user-header, --group-header,
	// --extra-header-prefix); whatever a client sent under them is
	// removed first.
	UserHeader, GroupHeader, ExtraHeaderPrefix string
	// Authorization is how an identified caller is authorized
	// (--authorization): AuthorizationAllow, the --allow-* flags alone, or
	// AuthorizationRBAC, Kubernetes RBAC through SubjectAccessReview
	// (after the --allow-* flags, when given).
	Authorization string
	// ConfigFile is kube-rbac-proxy's configuration file (--config-file):
	// what RBAC is asked about a request. Empty: the request's path as a
	// non-resource URL, its method as the verb.
	ConfigFile string
	// AuthorizationKubeconfig is the API server asked
	// (--authorization-kubeconfig); empty: --kubeconfig, else in-cluster.
	AuthorizationKubeconfig string
	// AuthorizationAllowTTL and AuthorizationDenyTTL are how long an
	// allowed and a denied answer are reused
	// (--authorization-allow-ttl, --authorization-deny-ttl).
	AuthorizationAllowTTL, AuthorizationDenyTTL time.Duration
	// AuthorizationCacheMaxEntries bounds the answers kept
	// (--authorization-cache-max-entries).
	AuthorizationCacheMaxEntries int
	// AuthorizationTimeout bounds one SubjectAccessReview
	// (--authorization-timeout).
	AuthorizationTimeout time.Duration
	// AuthorizationQPS and AuthorizationBurst bound the
	// SubjectAccessReviews sent per second (--authorization-qps,
	// --authorization-burst): client-go's own 5 and 10 would hold a
	// burst of new callers seconds behind its rate limiter. A review that
	// would wait past AuthorizationTimeout fails rbac_unavailable.
	AuthorizationQPS   float64
	AuthorizationBurst int
	// ClientCAFile lets callers without a token present a client
	// certificate signed by one of its CAs (--client-ca-file): its common
	// name is the username, its organizations the groups, as Kubernetes
	// reads one. Empty: tokens only.
	ClientCAFile string
	// IdentityAssertionAudience turns on the signed identity assertion
	// (--identity-assertion-audience): a JWT of the caller for this
	// audience (the upstream) in X-Callerauth-Identity, signed with
	// IdentityAssertionKeyFile's key (--identity-assertion-key-file; empty:
	// a key made at start-up), valid IdentityAssertionTTL
	// (--identity-assertion-ttl), its keys on the metrics listener.
	IdentityAssertionAudience string
	IdentityAssertionKeyFile  string
	IdentityAssertionTTL      time.Duration
	// AllowWebSocket forwards a WebSocket upgrade (--allow-websocket): its
	// handshake is judged as any request (never on an --ignore-paths
	// path); the frames after it are not. Off: refused 400. Any other
	// upgrade is always refused and an h2c offer declined.
	AllowWebSocket bool
	// PassBearerToken keeps the caller's Authorization header on the way
	// to the upstream (--pass-bearer-token). Off: it is removed.
	PassBearerToken bool
	// RoleFile names the role each request needs and the callers who
	// have each (--role-file): callerauth's role rule, binding.Roles.
	RoleFile string
	// CallerBindings are SYSTEM=PRINCIPAL (--caller-binding): a request
	// naming a system in SystemHeader (--system-header) is let through
	// only from the one principal bound to it, binding.SystemBinding.
	CallerBindings []string
	SystemHeader   string
	// DecisionLog keeps every request's verdict (--decision-log and its
	// settings, docs/decision-log.md); DecisionLogListen serves its read
	// API on a TLS listener of its own (--decision-log-listen), to the
	// principal --caller-binding binds to decisionlog.ReaderSystem.
	DecisionLog       decisionlog.Options
	DecisionLogListen string
	// kubeRBACProxy are the kube-rbac-proxy flags given (hidden; each
	// warned of or refused at start-up).
	kubeRBACProxy []krpFlag
}

// NewOptions returns the proxy's defaults: the one place they are written.
func NewOptions() Options {
	o := Options{Serve: serve.NewOptions(":8443", "127.0.0.1:9090").For("callerauth-proxy"), Callers: callers.NewOptions(),
		UpstreamHeaderTimeout: DefaultUpstreamHeaderTimeout,
		UserHeader:            DefaultUserHeader, GroupHeader: DefaultGroupHeader, ExtraHeaderPrefix: DefaultExtraHeaderPrefix,
		Authorization: AuthorizationAllow, AuthorizationAllowTTL: DefaultAuthorizationAllowTTL, AuthorizationDenyTTL: DefaultAuthorizationDenyTTL,
		AuthorizationCacheMaxEntries: DefaultAuthorizationCacheMaxEntries, AuthorizationTimeout: DefaultAuthorizationTimeout,
		AuthorizationQPS: DefaultAuthorizationQPS, AuthorizationBurst: DefaultAuthorizationBurst,
		IdentityAssertionTTL: DefaultAssertionTTL, SystemHeader: DefaultSystemHeader, DecisionLog: decisionlog.NewOptions()}
	o.Serve.HTTP.ReadTimeout, o.Serve.HTTP.WriteTimeout = DefaultStreamTimeout, DefaultStreamTimeout
	return o
}

// AddFlags registers the proxy's flags, with o's values as their defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.Serve.AddFlags(f)
	o.Callers.AddServiceFlags(f)
	serve.AddCallerFlags(f, &o.Callers)
	f.StringVar(&o.Upstream, "upstream", o.Upstream, "where allowed requests go: http://HOST:PORT[/PATH], https://HOST:PORT[/PATH] or unix:///PATH")
	f.StringVar(&o.UpstreamCAFile, "upstream-ca-file", o.UpstreamCAFile, "CA bundle (PEM) an https:// upstream's certificate is checked against (default: the system roots)")
	f.BoolVar(&o.UpstreamHTTP2, "upstream-http2", o.UpstreamHTTP2, "speak HTTP/2 to the upstream (prior knowledge over plain TCP or a Unix socket, ALPN over TLS); a gRPC upstream needs it")
	f.DurationVar(&o.UpstreamHeaderTimeout, "upstream-header-timeout", o.UpstreamHeaderTimeout, "how long the upstream may take to send its response headers (the body then streams)")
	f.StringArrayVar(&o.AllowServiceAccounts, "allow-service-account", o.AllowServiceAccounts, "NAMESPACE:NAME or NAMESPACE:*: a service account let through (repeatable)")
	f.StringArrayVar(&o.AllowGroups, "allow-group", o.AllowGroups, "a group whose members are let through (repeatable)")
	f.StringArrayVar(&o.AllowUsers, "allow-user", o.AllowUsers, "a username let through (repeatable)")
	f.StringSliceVar(&o.AllowPaths, "allow-paths", o.AllowPaths, "the only paths served (path.Match patterns, comma-separated); any other is 404")
	f.StringSliceVar(&o.IgnorePaths, "ignore-paths", o.IgnorePaths, "paths passed to the upstream without authentication (path.Match patterns, comma-separated)")
	f.StringVar(&o.UserHeader, "user-header", o.UserHeader, "the header carrying the caller's username to the upstream")
	f.StringVar(&o.GroupHeader, "group-header", o.GroupHeader, "the header carrying each of the caller's groups (one per group)")
	f.StringVar(&o.ExtraHeaderPrefix, "extra-header-prefix", o.ExtraHeaderPrefix, "the prefix of the headers carrying the caller's extra values (the key percent-encoded)")
	f.StringVar(&o.Authorization, "authorization", o.Authorization, "how identified callers are authorized: allow (the --allow-* flags) or rbac (Kubernetes RBAC through SubjectAccessReview, after the --allow-* flags when given)")
	f.StringVar(&o.ConfigFile, "config-file", o.ConfigFile, "rbac: kube-rbac-proxy's configuration file (authorization.resourceAttributes, rewrites, static), read as it is (default: the path as a non-resource URL)")
	f.StringVar(&o.AuthorizationKubeconfig, "authorization-kubeconfig", o.AuthorizationKubeconfig, "rbac: kubeconfig of the API server asked (default: --kubeconfig, else in-cluster)")
	f.DurationVar(&o.AuthorizationAllowTTL, "authorization-allow-ttl", o.AuthorizationAllowTTL, "rbac: how long an allowed answer is reused (a removed grant is refused at most this much later)")
	f.DurationVar(&o.AuthorizationDenyTTL, "authorization-deny-ttl", o.AuthorizationDenyTTL, "rbac: how long a denied answer is reused (an added grant is honoured at most this much later)")
	f.IntVar(&o.AuthorizationCacheMaxEntries, "authorization-cache-max-entries", o.AuthorizationCacheMaxEntries, "rbac: answers kept; beyond, the least recently used is dropped")
	f.DurationVar(&o.AuthorizationTimeout, "authorization-timeout", o.AuthorizationTimeout, "rbac: how long one SubjectAccessReview may take (past it, rbac_unavailable)")
	f.Float64Var(&o.AuthorizationQPS, "authorization-qps", o.AuthorizationQPS, "rbac: SubjectAccessReviews sent per second at most; one that would wait past --authorization-timeout fails as rbac_unavailable")
	f.IntVar(&o.AuthorizationBurst, "authorization-burst", o.AuthorizationBurst, "rbac: SubjectAccessReviews that may be sent at once above --authorization-qps")
	f.StringVar(&o.RoleFile, "role-file", o.RoleFile, "YAML or JSON: the role each request needs (METHOD /PATH-PATTERN) and the callers given each role (by service account, group, username or extra value); a request no entry names is refused role_missing")
	f.StringArrayVar(&o.CallerBindings, "caller-binding", o.CallerBindings, "SYSTEM=PRINCIPAL: a request naming SYSTEM in --system-header is let through only from PRINCIPAL (repeatable); one naming no bound system is refused. "+decisionlog.ReaderSystem+"=PRINCIPAL names who may read the decision log on --decision-log-listen instead (never a system of the upstream)")
	f.StringVar(&o.SystemHeader, "system-header", o.SystemHeader, "the request header naming the system a caller speaks for (with --caller-binding)")
	f.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA bundle (PEM): a caller without a token may present a client certificate it signed (common name: the user, organizations: the groups)")
	f.StringVar(&o.IdentityAssertionAudience, "identity-assertion-audience", o.IdentityAssertionAudience, "send the upstream a signed identity assertion (a JWT in X-Callerauth-Identity) for this audience, the upstream's name; its keys at /.well-known/jwks.json on --metrics-listen (default: none sent)")
	f.StringVar(&o.IdentityAssertionKeyFile, "identity-assertion-key-file", o.IdentityAssertionKeyFile, "PEM private key(s) signing the assertion (ES256 or EdDSA; the last signs, all are published; callerauth decision keygen makes one) (default: a key made at start-up)")
	f.DurationVar(&o.IdentityAssertionTTL, "identity-assertion-ttl", o.IdentityAssertionTTL, "how long an assertion is valid (at most 10m)")
	f.BoolVar(&o.AllowWebSocket, "allow-websocket", o.AllowWebSocket, "forward WebSocket upgrades: the handshake is authenticated and authorized as any request (never on an --ignore-paths path), the frames after it are not (default: refused 400); other upgrades are always refused, an h2c offer declined")
	f.BoolVar(&o.PassBearerToken, "pass-bearer-token", o.PassBearerToken, "pass the caller's Authorization header to the upstream (default: removed)")
	o.DecisionLog.AddFlags(f)
	f.StringVar(&o.DecisionLogListen, "decision-log-listen", o.DecisionLogListen, "host:port serving the decision log's read API (search, proofs, tiles) over TLS with the proxy's certificate, to the principal --caller-binding "+decisionlog.ReaderSystem+"=PRINCIPAL names (empty: not served)")
	addKubeRBACProxyFlags(f, &o.kubeRBACProxy)
}

// Validate refuses options that cannot be honoured, naming the flags:
// what [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
}

// Config is the proxy's completed configuration, as [New] reads it.
type Config struct {
	Serve   serve.Options
	Callers callers.Config
	// Upstream is the parsed --upstream; UnixSocket its path when it is a
	// Unix socket (Upstream is then http://unix, or https:// never).
	Upstream              *url.URL
	UnixSocket            string
	UpstreamCAs           *x509.CertPool
	UpstreamHTTP2         bool
	UpstreamHeaderTimeout time.Duration
	Allowed               binding.RoleGrant
	AllowPaths            []string
	IgnorePaths           []string
	UserHeader            string
	GroupHeader           string
	ExtraHeaderPrefix     string
	PassBearerToken       bool
	AllowWebSocket        bool
	// Assertion is set under --identity-assertion-audience.
	Assertion *AssertionConfig
	// ClientCAs verify callers' client certificates (--client-ca-file);
	// nil: none is asked for.
	ClientCAs *x509.CertPool
	// Authorization is --authorization; under AuthorizationRBAC, RBAC is
	// the attributes policy, the API server asked and its cache.
	Authorization string
	RBAC          *RBACConfig
	// Roles is the read --role-file (nil: none); Bindings
	// --caller-binding's system to principal, read from SystemHeader
	// (nil: none); Warnings what start-up logs of them.
	Roles        *Roles
	Bindings     map[string]string
	SystemHeader string
	Warnings     []string
	// DecisionLog is --decision-log's (On: every verdict kept);
	// DecisionLogListen serves its read API to LogReader, the principal
	// bound to decisionlog.ReaderSystem (never one of Bindings).
	DecisionLog       decisionlog.Config
	DecisionLogListen string
	LogReader         string
}

// Complete validates the options — refusing every one that cannot be
// honoured, naming its flag — and returns the configuration New reads.
func (o Options) Complete() (Config, error) {
	var errs []error
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	callerCfg, err := o.Callers.Complete()
	if err != nil {
		errs = append(errs, err)
	}
	if !o.Serve.HasTLS() {
		errs = append(errs, errors.New("proxy: --tls-cert-file and --tls-key-file are required: callers' bearer tokens must not cross the network in clear"))
	}
	c := Config{Serve: o.Serve, Callers: callerCfg, UpstreamHTTP2: o.UpstreamHTTP2, UpstreamHeaderTimeout: o.UpstreamHeaderTimeout,
		PassBearerToken: o.PassBearerToken, AllowWebSocket: o.AllowWebSocket, Authorization: o.Authorization,
		UserHeader: textproto.CanonicalMIMEHeaderKey(o.UserHeader), GroupHeader: textproto.CanonicalMIMEHeaderKey(o.GroupHeader),
		ExtraHeaderPrefix: textproto.CanonicalMIMEHeaderKey(o.ExtraHeaderPrefix)}
	c.Upstream, c.UnixSocket, err = parseUpstream(o.Upstream)
	if err != nil {
		errs = append(errs, err)
	}
	if o.UpstreamCAFile != "" {
		if c.Upstream != nil && c.Upstream.Scheme != "https" {
			errs = append(errs, fmt.Errorf("proxy: --upstream-ca-file verifies an https:// upstream; --upstream %q is not one", o.Upstream))
		}
		if c.UpstreamCAs, err = readCAs("--upstream-ca-file", o.UpstreamCAFile); err != nil {
			errs = append(errs, err)
		}
	}
	if o.ClientCAFile != "" {
		if c.ClientCAs, err = readCAs("--client-ca-file", o.ClientCAFile); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case o.IdentityAssertionAudience != "":
		if o.IdentityAssertionTTL <= 0 || o.IdentityAssertionTTL > MaxAssertionTTL {
			errs = append(errs, fmt.Errorf("proxy: --identity-assertion-ttl %s: want a positive duration of at most %s (an assertion is for one request)", o.IdentityAssertionTTL, MaxAssertionTTL))
		}
		c.Assertion = &AssertionConfig{Audience: o.IdentityAssertionAudience, KeyFile: o.IdentityAssertionKeyFile, TTL: o.IdentityAssertionTTL}
	case o.IdentityAssertionKeyFile != "":
		errs = append(errs, errors.New("proxy: --identity-assertion-key-file signs the identity assertion: give --identity-assertion-audience (the upstream's name) to send one"))
	}
	if o.UpstreamHeaderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("proxy: --upstream-header-timeout %s: want a positive duration", o.UpstreamHeaderTimeout))
	}
	c.Allowed = binding.RoleGrant{Role: allowedRole, ServiceAccounts: o.AllowServiceAccounts, Groups: o.AllowGroups, Usernames: o.AllowUsers}
	named := len(o.AllowServiceAccounts)+len(o.AllowGroups)+len(o.AllowUsers) > 0
	switch o.Authorization {
	case AuthorizationAllow:
		if o.ConfigFile != "" || o.AuthorizationKubeconfig != "" {
			errs = append(errs, errors.New("proxy: --config-file and --authorization-kubeconfig belong to --authorization rbac"))
		}
	case AuthorizationRBAC:
		r, err := o.completeRBAC()
		if err != nil {
			errs = append(errs, err)
		}
		c.RBAC = r
	default:
		errs = append(errs, fmt.Errorf("proxy: --authorization %q: want %s (the --allow-* flags) or %s (Kubernetes RBAC through SubjectAccessReview)", o.Authorization, AuthorizationAllow, AuthorizationRBAC))
	}
	if o.RoleFile != "" {
		// An AuthenticationConfiguration's claim mappings may state
		// roles; TokenReview and the watch never do.
		if c.Roles, err = readRoleFile(o.RoleFile, o.Callers.Backend == callers.BackendOIDC); err != nil {
			errs = append(errs, err)
		}
	}
	if len(o.CallerBindings) > 0 {
		if c.Bindings, c.Warnings, err = binding.ParseSystemBindings("--caller-binding", o.CallerBindings); err != nil {
			errs = append(errs, fmt.Errorf("proxy: %w", err))
		}
		c.SystemHeader = textproto.CanonicalMIMEHeaderKey(o.SystemHeader)
		if o.SystemHeader == "" || strings.ContainsAny(o.SystemHeader, " \t:") || slices.Contains([]string{"Authorization", c.UserHeader, c.GroupHeader}, c.SystemHeader) ||
			strings.HasPrefix(c.SystemHeader, c.ExtraHeaderPrefix) {
			errs = append(errs, fmt.Errorf("proxy: --system-header %q: want a header name other than Authorization and the identity headers", o.SystemHeader))
		}
	}
	if reader, ok := c.Bindings[decisionlog.ReaderSystem]; ok {
		// The log's reader, not a system of the upstream: a request
		// naming it in --system-header is refused as any unbound one.
		c.LogReader = reader
		delete(c.Bindings, decisionlog.ReaderSystem)
		if len(c.Bindings) == 0 {
			c.Bindings = nil
		}
	}
	errs = append(errs, c.completeDecisionLog(o)...)
	if len(o.CallerBindings) == 0 && o.SystemHeader != DefaultSystemHeader {
		errs = append(errs, fmt.Errorf("proxy: --system-header %q names where a request's system is read for --caller-binding; give --caller-binding SYSTEM=PRINCIPAL", o.SystemHeader))
	}
	ruled := named || o.RoleFile != "" || len(c.Bindings) > 0
	if !ruled && o.Authorization != AuthorizationRBAC {
		errs = append(errs, errors.New("proxy: name the callers let through: --allow-service-account NAMESPACE:NAME (or NAMESPACE:*), --allow-group or --allow-user, --role-file or --caller-binding (or ask Kubernetes RBAC: --authorization rbac)"))
	}
	if named {
		if err := (binding.RoleConfig{Grants: []binding.RoleGrant{c.Allowed}}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("proxy: --allow-service-account: %w", err))
		}
	}
	if len(o.AllowPaths) > 0 && len(o.IgnorePaths) > 0 {
		errs = append(errs, errors.New("proxy: --allow-paths and --ignore-paths: give one (as kube-rbac-proxy)"))
	}
	for _, p := range append(append([]string{}, o.AllowPaths...), o.IgnorePaths...) {
		if _, err := path.Match(p, "/"); err != nil || !strings.HasPrefix(p, "/") {
			errs = append(errs, fmt.Errorf("proxy: path pattern %q: want a path.Match pattern beginning with /", p))
		}
	}
	c.AllowPaths, c.IgnorePaths = o.AllowPaths, o.IgnorePaths
	for _, h := range []struct{ flag, v string }{{"--user-header", o.UserHeader}, {"--group-header", o.GroupHeader}, {"--extra-header-prefix", o.ExtraHeaderPrefix}} {
		if h.v == "" || strings.ContainsAny(h.v, " \t:") || strings.EqualFold(h.v, "Authorization") {
			errs = append(errs, fmt.Errorf("proxy: %s %q: want a header name (not Authorization)", h.flag, h.v))
		}
	}
	krpWarnings, krpErrs := krpMessages(o.kubeRBACProxy)
	c.Warnings = append(c.Warnings, krpWarnings...)
	errs = append(errs, krpErrs...)
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// completeDecisionLog reads --decision-log's settings and where its
// read API is served.
func (c *Config) completeDecisionLog(o Options) []error {
	var errs []error
	c.DecisionLogListen = o.DecisionLogListen
	var err error
	if c.DecisionLog, err = o.DecisionLog.Complete(); err != nil {
		errs = append(errs, fmt.Errorf("proxy: %w", err))
	}
	switch {
	case !o.DecisionLog.On() && (o.DecisionLogListen != "" || c.LogReader != ""):
		errs = append(errs, fmt.Errorf("proxy: --decision-log-listen and --caller-binding %s=PRINCIPAL serve the decision log: give --decision-log", decisionlog.ReaderSystem))
	case c.LogReader != "" && o.DecisionLogListen == "":
		errs = append(errs, fmt.Errorf("proxy: --caller-binding %s=%s names a reader of the decision log, but nothing serves it: give --decision-log-listen", decisionlog.ReaderSystem, c.LogReader))
	}
	if o.DecisionLogListen != "" {
		if _, _, err := net.SplitHostPort(o.DecisionLogListen); err != nil {
			errs = append(errs, fmt.Errorf("proxy: --decision-log-listen %q: want host:port", o.DecisionLogListen))
		}
	}
	return errs
}

// Defaults.
const (
	DefaultUserHeader        = "X-Remote-User"
	DefaultSystemHeader      = "X-Callerauth-System"
	DefaultGroupHeader       = "X-Remote-Group"
	DefaultExtraHeaderPrefix = "X-Remote-Extra-"
	// DefaultStreamTimeout is the proxy's --http-read-timeout and
	// --http-write-timeout: a proxied stream (a gRPC watch, a download)
	// lasts at most this long.
	DefaultStreamTimeout         = time.Hour
	DefaultUpstreamHeaderTimeout = 30 * time.Second
	// The --authorization rbac defaults: kube-rbac-proxy's TTLs (the
	// kubelet's), a bounded cache, the review timeout of TokenReview.
	DefaultAuthorizationAllowTTL        = 5 * time.Minute
	DefaultAuthorizationDenyTTL         = 30 * time.Second
	DefaultAuthorizationCacheMaxEntries = 10000
	DefaultAuthorizationTimeout         = 5 * time.Second
	DefaultAuthorizationQPS             = 100
	DefaultAuthorizationBurst           = 200
)

// The --authorization values.
const (
	AuthorizationAllow = "allow"
	AuthorizationRBAC  = "rbac"
)

// AssertionConfig is the signed identity assertion's.
type AssertionConfig struct {
	Audience, KeyFile string
	TTL               time.Duration
}

// RBACConfig is --authorization rbac's completed configuration.
type RBACConfig struct {
	policy     attributesPolicy
	ConfigFile string
	Kubeconfig string
	access     accessConfig
}

// completeRBAC reads --authorization rbac's flags and --config-file.
func (o Options) completeRBAC() (*RBACConfig, error) {
	var errs []error
	r := &RBACConfig{ConfigFile: o.ConfigFile, Kubeconfig: cmp.Or(o.AuthorizationKubeconfig, o.Callers.Kubeconfig),
		access: accessConfig{AllowTTL: o.AuthorizationAllowTTL, DenyTTL: o.AuthorizationDenyTTL, MaxEntries: o.AuthorizationCacheMaxEntries, Timeout: o.AuthorizationTimeout,
			QPS: o.AuthorizationQPS, Burst: o.AuthorizationBurst}}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--authorization-allow-ttl", o.AuthorizationAllowTTL}, {"--authorization-deny-ttl", o.AuthorizationDenyTTL}, {"--authorization-timeout", o.AuthorizationTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("proxy: %s %s: want a positive duration", d.flag, d.v))
		}
	}
	if o.AuthorizationCacheMaxEntries <= 0 {
		errs = append(errs, fmt.Errorf("proxy: --authorization-cache-max-entries %d: want a positive number", o.AuthorizationCacheMaxEntries))
	}
	if !(o.AuthorizationQPS > 0) || math.IsInf(o.AuthorizationQPS, 0) {
		errs = append(errs, fmt.Errorf("proxy: --authorization-qps %v: want a positive number", o.AuthorizationQPS))
	}
	if o.AuthorizationBurst < 1 {
		errs = append(errs, fmt.Errorf("proxy: --authorization-burst %d: want 1 or more", o.AuthorizationBurst))
	}
	if o.ConfigFile != "" {
		p, err := readAuthzFile(o.ConfigFile)
		if err != nil {
			errs = append(errs, err)
		}
		r.policy = p
	}
	return r, errors.Join(errs...)
}

// readCAs reads a CA bundle flag's file.
func readCAs(flag, name string) (*x509.CertPool, error) {
	pool, err := fsutil.ReadCAs(flag, name)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return pool, nil
}

// readFlagFile reads the file a flag names, at most limit bytes.
func readFlagFile(flag, name string, limit int) ([]byte, error) {
	b, err := fsutil.ReadFlagFile(flag, name, limit)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return b, nil
}

// parseUpstream reads --upstream.
func parseUpstream(s string) (*url.URL, string, error) {
	if s == "" {
		return nil, "", errors.New("proxy: --upstream is required: http://HOST:PORT, https://HOST:PORT or unix:///PATH")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, "", fmt.Errorf("proxy: --upstream %q: %w", s, err)
	}
	switch {
	case u.Scheme == "unix" && u.Host == "" && u.Path != "" && u.RawQuery == "":
		return &url.URL{Scheme: "http", Host: "unix"}, u.Path, nil
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil && u.RawQuery == "" && u.Fragment == "":
		return u, "", nil
	}
	return nil, "", fmt.Errorf("proxy: --upstream %q: want http://HOST:PORT[/PATH], https://HOST:PORT[/PATH] or unix:///PATH", s)
}

// allowedRole is the one role the proxy's rule requires: the callers
// the --allow-* flags name hold it.
const allowedRole = "proxy:allowed"

// stripped reports whether a request header is one the proxy sets for
// the upstream (a client's is never passed on), read as a server that
// takes _ for - reads it: X_Remote_User is X-Remote-User there.
func (c Config) stripped(name string) bool {
	name = headerName(name)
	return name == c.UserHeader || name == c.GroupHeader || strings.HasPrefix(name, c.ExtraHeaderPrefix) || name == AssertionHeader || name == AuditRefusalHeader
}
