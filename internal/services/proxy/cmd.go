package proxy

import (
	"context"
	"io"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/internal/serve"
)

// NewCommand is the callerauth-proxy command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "callerauth-proxy",
		Short: "The callerauth guard in front of one upstream service of any language",
		Long: `callerauth-proxy verifies each request's bearer token for --caller-audience
(TokenReview with the verdict cache, an AuthenticationConfiguration, or the
bound-object watch), lets through the callers --allow-service-account,
--allow-group and --allow-user name, and passes the request to --upstream
(HTTP/1.1 or HTTP/2; gRPC and streams pass through) with the caller's
identity in X-Remote-User, X-Remote-Group and X-Remote-Extra-* and its
token removed. See docs/proxy.md.`,
	}
	serve.Command(cmd, &o.Serve, stderr, serve.Complete(&o, New))
	o.AddFlags(cmd.Flags())
	return cmd
}

// AddFlags registers the proxy's flags, with o's values as their defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.Serve.AddFlags(f)
	serve.AddCallerFlags(f, &o.Callers)
	f.StringVar(&o.Upstream, "upstream", o.Upstream, "where allowed requests go: http://HOST:PORT[/PATH], https://HOST:PORT[/PATH] or unix:///PATH")
	f.StringVar(&o.UpstreamCAFile, "upstream-ca-file", o.UpstreamCAFile, "CA bundle (PEM) an https:// upstream's certificate is checked against (default: the system roots)")
	f.BoolVar(&o.UpstreamHTTP2, "upstream-http2", o.UpstreamHTTP2, "speak HTTP/2 to the upstream (prior knowledge over plain TCP or a Unix socket, ALPN over TLS); a gRPC upstream needs it")
	f.DurationVar(&o.UpstreamHeaderTimeout, "upstream-header-timeout", o.UpstreamHeaderTimeout, "how long the upstream may take to send its response headers (the body then streams)")
	f.StringVar(&o.CallerAudience, "caller-audience", o.CallerAudience, "the audience callers' tokens must be minted for (required)")
	f.StringVar(&o.CallerAuthMode, "caller-auth-mode", o.CallerAuthMode, "enforce, or audit: refusals are logged and counted but let through")
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
	f.StringArrayVar(&o.CallerBindings, "caller-binding", o.CallerBindings, "SYSTEM=PRINCIPAL: a request naming SYSTEM in --system-header is let through only from PRINCIPAL (repeatable); one naming no bound system is refused")
	f.StringVar(&o.SystemHeader, "system-header", o.SystemHeader, "the request header naming the system a caller speaks for (with --caller-binding)")
	f.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA bundle (PEM): a caller without a token may present a client certificate it signed (common name: the user, organizations: the groups)")
	f.StringVar(&o.IdentityAssertionAudience, "identity-assertion-audience", o.IdentityAssertionAudience, "send the upstream a signed identity assertion (a JWT in X-Callerauth-Identity) for this audience, the upstream's name; its keys at /.well-known/jwks.json on --metrics-listen (default: none sent)")
	f.StringVar(&o.IdentityAssertionKeyFile, "identity-assertion-key-file", o.IdentityAssertionKeyFile, "PEM private key(s) signing the assertion (ES256 or EdDSA; the last signs, all are published; callerauth decision keygen makes one) (default: a key made at start-up)")
	f.DurationVar(&o.IdentityAssertionTTL, "identity-assertion-ttl", o.IdentityAssertionTTL, "how long an assertion is valid (at most 10m)")
	f.BoolVar(&o.AllowWebSocket, "allow-websocket", o.AllowWebSocket, "forward WebSocket upgrades: the handshake is authenticated and authorized as any request (never on an --ignore-paths path), the frames after it are not (default: refused 400); other upgrades are always refused, an h2c offer declined")
	f.BoolVar(&o.PassBearerToken, "pass-bearer-token", o.PassBearerToken, "pass the caller's Authorization header to the upstream (default: removed)")
	addKubeRBACProxyFlags(f, &o.kubeRBACProxy)
}

// ParseArgs reads a command line as callerauth-proxy does, without
// running it (what a chart renders).
func ParseArgs(args []string) (Options, error) {
	o := NewOptions()
	if err := serve.ParseArgs("callerauth-proxy", o.AddFlags, args); err != nil {
		return Options{}, err
	}
	return o, nil
}

// DefaultGCPercent is the collector's target while $GOGC is unset: the
// heap may grow to three times what is live before a collection, not
// twice. The proxy's live heap is small (2–3 MB, most of it the linked
// Kubernetes packages' tables made at start-up) and each request
// allocates about 11 KB, so at Go's default the collector ran every few
// milliseconds under load and marked those tables each time: a quarter
// more CPU a request than a bare ReverseProxy, measured
// (docs/performance.md). At 200 it costs a few MB of memory.
const DefaultGCPercent = 200

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	setGCPercent()
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}

// setGCPercent sets DefaultGCPercent unless $GOGC says otherwise, and
// returns the target in force.
func setGCPercent() int {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
	return gcPercent()
}

// gcPercent is the collector's target in force (the start-up line says it).
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 {
		return -1 // off (GOGC=off reads as the largest value)
	}
	return int(v)
}
