// Package proxy is callerauth-proxy: the guard in front of a service of
// any language. Each request's bearer token is verified (TokenReview, an
// AuthenticationConfiguration, or the bound-object watch, as every
// callerauth service), the caller checked against the callers let
// through, and an allowed request passed to the one upstream — HTTP/1.1
// or HTTP/2, gRPC with its trailers, streams flushed as they come — with
// the caller's identity in headers and its token removed. See
// docs/proxy.md.
package proxy

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/copybuf"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/reason"
)

// ReasonNotAllowed refuses a verified caller the --allow-* flags do not
// name.
var ReasonNotAllowed = reason.New("caller_not_allowed", reason.PermissionDenied, "the caller is not among those this proxy lets through")

// ReasonUpstreamUnavailable answers a request the upstream could not
// take (unreachable, or no response headers within
// --upstream-header-timeout).
var ReasonUpstreamUnavailable = reason.New("upstream_unavailable", reason.Unavailable, "the service behind the proxy did not answer")

// Reasons are every reason the proxy can send: the authentication
// failures, its rule's, and its own. docs/proxy.md lists each;
// test/reasons holds the code to this list.
func Reasons() []reason.Reason {
	// --role-file's roles refuse role_missing (they never require a
	// tenant), --caller-binding's systems principal_cannot_represent_system.
	rules := []reason.Reason{binding.ReasonRoleMissing, binding.ReasonPrincipalCannotRepresentSystem}
	rules = append(append(append(rules, (&rbac{}).Reasons()...), ReasonUpstreamUnavailable, guard.ReasonBadRequest), decisionlog.Reasons()...)
	return reason.Union(binding.Reasons(allowRule(binding.RoleGrant{})), rules...)
}

// Server is a running proxy.
type Server struct {
	c      Config
	m      *serve.Manager
	log    *slog.Logger
	guard  *guard.Guard
	proxy  *httputil.ReverseProxy
	health *serve.Health

	rbac           *rbac
	asserter       *asserter
	upstreamErrors prometheus.Counter
	ignored        prometheus.Counter
	badPaths       prometheus.Counter
	certCallers    prometheus.Counter

	clientBodyErrors prometheus.Counter
	upgrades         *prometheus.CounterVec

	// dlog keeps every verdict (--decision-log), nil when none; dlogAPI
	// is its read API (--decision-log-listen), nil when not served.
	dlog    *decisionlog.Log
	dlogAPI http.Handler
}

// New builds the proxy: the caller authentication, the rule, the
// upstream transport.
func New(c Config) (*Server, error) {
	m, err := serve.New("callerauth-proxy", c.Serve, nil)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	m.Health().Registry.MustRegister(serve.BuildInfo("proxy"))
	s := &Server{c: c, m: m, log: m.Logger(), health: m.Health()}
	s.upstreamErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "proxy_upstream_errors_total",
		Help: "Allowed requests the upstream did not answer (unreachable, or no response headers in time): answered 503 upstream_unavailable."})
	s.ignored = prometheus.NewCounter(prometheus.CounterOpts{Name: "proxy_ignored_path_requests_total",
		Help: "Requests to an --ignore-paths path, passed to the upstream without authentication."})
	s.badPaths = prometheus.NewCounter(prometheus.CounterOpts{Name: "proxy_bad_path_requests_total",
		Help: "Requests whose path is not in canonical form (a . or .. segment, a repeated /): answered 400 bad_request before authentication, never passed on."})
	s.certCallers = prometheus.NewCounter(prometheus.CounterOpts{Name: "proxy_client_certificate_callers_total",
		Help: "Requests without a token identified by a client certificate --client-ca-file verified."})
	s.clientBodyErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "proxy_client_body_errors_total",
		Help: "Requests whose body the client failed to send (a malformed chunk, the read timeout): answered 400 bad_request, not counted as upstream errors."})
	s.upgrades = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxy_upgrade_requests_total",
		Help: "Requests asking to switch protocols, by outcome: websocket (judged and forwarded under --allow-websocket) or refused (400 bad_request). An h2c offer is declined, not counted."}, []string{"outcome"})
	s.health.Registry.MustRegister(s.upstreamErrors, s.ignored, s.badPaths, s.certCallers, s.clientBodyErrors, s.upgrades)
	svc := callers.Service{Name: "proxy", Rule: rule(c)}
	for _, w := range c.Warnings {
		s.log.Warn("proxy: " + w)
	}
	if c.Authorization == AuthorizationRBAC {
		z, err := newRBAC(*c.RBAC)
		if err != nil {
			return nil, err
		}
		s.rbac, svc.Authorizer = z, z
		s.health.Registry.MustRegister(z.Collectors()...)
	}
	if a := c.Assertion; a != nil {
		if s.asserter, err = newAsserter(a.Audience, a.KeyFile, a.TTL); err != nil {
			return nil, err
		}
		s.health.Handle("GET "+PathJWKS, http.HandlerFunc(s.asserter.serveJWKS))
	}
	s.guard, err = m.Guard(c.Callers, svc)
	if err != nil {
		return nil, fmt.Errorf("proxy: caller authentication: %w", err)
	}
	if err := s.openDecisionLog(); err != nil {
		return nil, err
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		ModifyResponse: modifyResponse,
		Transport:      tracedTransport(c),
		// FlushInterval 0: a response of unknown length (gRPC, a chunked
		// stream) or a text/event-stream is flushed as each write comes,
		// by ReverseProxy itself; one whose length is known is written
		// once, not its headers first in a record of their own.
		BufferPool:   &copybuf.Pool{},
		ErrorLog:     slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandler: s.upstreamError,
	}
	return s, nil
}

// rule is what the proxy checks of an identified caller, in order: the
// --allow-* flags, --role-file's roles, --caller-binding's systems. RBAC,
// when asked, comes after it (the guard's authorizer).
func rule(c Config) binding.Rule {
	rules := []binding.Rule{allowRule(c.Allowed)}
	if c.Roles != nil {
		rules = append(rules, c.Roles.rule())
	}
	if len(c.Bindings) > 0 {
		rules = append(rules, binding.SystemBinding(c.Bindings))
	}
	if len(rules) == 1 {
		return rules[0]
	}
	return binding.All(rules...)
}

// allowRule lets through the callers allowed names; with none named
// (--authorization rbac alone), every identified caller, for RBAC to
// judge.
func allowRule(allowed binding.RoleGrant) binding.Rule {
	any := len(allowed.ServiceAccounts)+len(allowed.Groups)+len(allowed.Usernames) == 0
	return binding.Deny([]reason.Reason{binding.ReasonTokenMissing, ReasonNotAllowed}, func(s binding.Subject, _ binding.Request) *binding.Violation {
		switch {
		case s.Caller == nil:
			return &binding.Violation{Reason: binding.ReasonTokenMissing, Detail: "the proxy lets no caller through without a token"}
		case !any && !allowed.Names(s.Caller):
			return &binding.Violation{Reason: ReasonNotAllowed, Detail: fmt.Sprintf("%s is not named by --allow-service-account, --allow-group or --allow-user", s.Caller.Username)}
		}
		return nil
	})
}

// transport reaches the upstream: over TCP or its Unix socket, TLS
// verified against --upstream-ca-file, HTTP/2 when asked.
func transport(c Config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the upstream is reached directly, never through $HTTPS_PROXY
	tr.ResponseHeaderTimeout = c.UpstreamHeaderTimeout
	tr.MaxIdleConnsPerHost = 64
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.UpstreamCAs}
	if c.UnixSocket != "" {
		d := net.Dialer{Timeout: 5 * time.Second}
		sock := c.UnixSocket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }
	}
	if c.UpstreamHTTP2 {
		var p http.Protocols
		if c.Upstream.Scheme == "https" {
			p.SetHTTP2(true)
		} else {
			p.SetUnencryptedHTTP2(true)
		}
		tr.Protocols = &p
	}
	return tr
}

// tracedTransport is the upstream's transport; with traces on
// (--otlp-endpoint), each upstream call is a client span, child of the
// request's, whose traceparent the upstream receives in place of the
// caller's.
func tracedTransport(c Config) http.RoundTripper {
	t := transport(c)
	if !c.Serve.Tracing.On() {
		return t
	}
	return otelhttp.NewTransport(t)
}

// Handler is the proxy's API: the path filters, the guard, the upstream.
func (s *Server) Handler() http.Handler {
	var extract guard.HTTPRequest
	if (s.rbac != nil && s.rbac.policy.rewrites()) || len(s.c.Bindings) > 0 {
		extract = s.request
	}
	opts := []guard.MiddlewareOption{guard.RequireIdentity(), guard.WithRefusal(s.refuse)}
	if s.c.ClientCAs != nil {
		opts = append(opts, guard.WithPeerIdentity(s.certificateCaller))
	}
	guarded := s.guard.Middleware(extract, opts...)(s.kept(s.proxy))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clean, ok := canonical(r.URL.Path, r.URL.EscapedPath())
		if !ok {
			// What the path filters and RBAC judge must be what the
			// upstream serves, whatever server it is: /metrics/../admin
			// is not /metrics, nor /ok/..;/admin /ok to Tomcat.
			s.badPaths.Inc()
			s.badRequest(w, r, "the path is not one every server reads alike (a . or .. segment, a repeated /, a ;, a %, a \\, an encoded /, a segment ending in a dot or a space, or a control character)")
			return
		}
		if len(s.c.AllowPaths) > 0 && !matches(s.c.AllowPaths, clean) {
			http.NotFound(w, r)
			return
		}
		ignored := matches(s.c.IgnorePaths, clean)
		switch screenUpgrade(r) {
		case websocketUpgrade:
			if !s.c.AllowWebSocket || ignored {
				s.upgrades.WithLabelValues("refused").Inc()
				s.badRequest(w, r, "a WebSocket upgrade is forwarded only with --allow-websocket, and never on an --ignore-paths path")
				return
			}
			s.upgrades.WithLabelValues("websocket").Inc()
		case refusedUpgrade:
			s.upgrades.WithLabelValues("refused").Inc()
			s.badRequest(w, r, "the proxy forwards no protocol upgrade but WebSocket's (an h2c offer is declined), and no CONNECT")
			return
		}
		r = withClientBody(r)
		if ignored {
			s.ignored.Inc()
			s.proxy.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// badRequest refuses a request the proxy will not pass on, before
// anything else reads it.
func (s *Server) badRequest(w http.ResponseWriter, r *http.Request, detail string) {
	s.refuse(w, r, &guard.Verdict{Reason: guard.ReasonBadRequest})
	s.log.Warn("refused", "reason", guard.ReasonBadRequest.String(), "detail", detail, "method", r.Method, "path", guard.LogValue(r.URL.Path))
}

// request is what the guard judges of an HTTP request when more than its
// method and path are read: the system it names (--caller-binding) and
// the RBAC rewrite's values — read only once the caller is identified.
func (s *Server) request(r *http.Request) (binding.Request, error) {
	req := binding.Request{Method: r.Method + " " + r.URL.Path}
	if len(s.c.Bindings) > 0 {
		sys, err := systemOf(r, s.c.SystemHeader)
		if err != nil {
			return req, err
		}
		req.System = sys
	}
	if s.rbac != nil {
		req.Attributes = s.rbac.attributes(r)
	}
	return req, nil
}

func matches(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool {
		ok, _ := path.Match(pat, p)
		return ok
	})
}

// rewrite makes the upstream's request: its URL, the client's identity
// headers removed, the verified caller's set, the token removed unless
// asked for.
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(s.c.Upstream)
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	for name := range pr.Out.Header {
		if s.c.stripped(name) {
			pr.Out.Header.Del(name)
		}
	}
	if !s.c.PassBearerToken {
		pr.Out.Header.Del("Authorization")
	}
	v, ok := guard.FromContext(pr.In.Context())
	if !ok {
		return // an ignored path: no identity
	}
	if !v.Reason.IsZero() {
		// audit let a refusal through: the upstream is told which.
		pr.Out.Header.Set(AuditRefusalHeader, v.Reason.String())
	}
	if v.Caller == nil {
		return // no caller (a refusal audit let through)
	}
	setIdentity(pr.Out.Header, s.c, v.Caller)
	if s.asserter != nil {
		jws, err := s.asserter.assert(v.Caller, v.Reason, pr.In)
		if err != nil {
			// Not reached with the keys New accepted; the upstream then
			// gets no assertion, which it must refuse.
			s.log.Error("proxy: signing the identity assertion", "err", err)
			return
		}
		pr.Out.Header.Set(AssertionHeader, jws)
	}
}

// errUnaskedUpgrade is an upstream's 101 to a request that asked for no
// upgrade the proxy forwards: passed on, it would open a tunnel past
// every check.
var errUnaskedUpgrade = errors.New("the upstream switched protocols (101) on a request that asked for no upgrade the proxy forwards")

// modifyResponse screens the upstream's response: a 101 only to a
// WebSocket upgrade the proxy let through, a gRPC trailers-only
// response's status as trailers.
func modifyResponse(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols && !hasToken(res.Request.Header["Upgrade"], "websocket") {
		return errUnaskedUpgrade
	}
	return trailersOnly(res)
}

// trailersOnly makes a gRPC trailers-only response — the status in the
// one HEADERS frame that ends the stream, as a server answers an error
// before any message, which Go's transport hands over as headers — a
// response whose status comes in trailers. Passed on as headers, the
// status would reach the caller only if those headers also ended the
// stream; the proxy flushes a response's headers as they come (streams
// must not wait), and a flush before the empty body is read sends them
// without ending it, which a gRPC client takes for a stream closed
// without a status. As trailers, the status arrives at the end however
// the frames fall. Every field but Content-Type moves: in a
// trailers-only response all of them are trailing metadata.
func trailersOnly(res *http.Response) error {
	if res.Header.Get("Grpc-Status") == "" || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/grpc") {
		return nil
	}
	if res.Trailer == nil {
		res.Trailer = http.Header{}
	}
	for name, vs := range res.Header {
		if name != "Content-Type" {
			res.Trailer[name] = vs
			delete(res.Header, name)
		}
	}
	return nil
}

// setIdentity writes the caller into the upstream's headers as the
// Kubernetes API server's front proxy does: the user, one header per
// group, one per extra value under the prefix with the key
// percent-encoded.
func setIdentity(h http.Header, c Config, caller *authn.Caller) {
	h.Set(c.UserHeader, caller.Username)
	for _, g := range caller.Groups {
		h.Add(c.GroupHeader, g)
	}
	for k, vs := range caller.Extra {
		name := c.ExtraHeaderPrefix + url.PathEscape(k)
		for _, v := range vs {
			h.Add(name, v)
		}
	}
}

// refuse answers a refusal in the caller's protocol: gRPC status headers
// with the reason in an ErrorInfo for a gRPC call, the guard's JSON
// otherwise.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, v *guard.Verdict) {
	s.logRefusal(r, v)
	if !isGRPC(r) {
		guard.WriteRefusal(w, v)
		return
	}
	writeGRPCStatus(w, v.Status())
}

// writeGRPCStatus answers a gRPC call with st alone, in a trailers-only
// response: the status, its message and its details (the ErrorInfo) as
// gRPC over HTTP/2 carries them.
func writeGRPCStatus(w http.ResponseWriter, st *status.Status) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(st.Code())))
	h.Set("Grpc-Message", url.PathEscape(st.Message()))
	if b, err := proto.Marshal(st.Proto()); err == nil {
		h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
	}
	w.WriteHeader(http.StatusOK)
}

func isGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// upstreamError answers a request the upstream did not take — or that
// could not be sent to it because the client's body was broken, which is
// the client's fault: 400 bad_request, not an upstream error.
func (s *Server) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the caller went away
	}
	if berr := bodyError(r); berr != nil {
		s.clientBodyErrors.Inc()
		s.badRequest(w, r, "the request's body could not be read: "+berr.Error())
		return
	}
	s.upstreamErrors.Inc()
	s.log.Warn("proxy: the upstream did not answer", "method", r.Method, "path", guard.LogValue(r.URL.Path), "err", err)
	if isGRPC(r) {
		writeGRPCStatus(w, status.Convert(guard.Refuse(ReasonUpstreamUnavailable, "")))
		return
	}
	guard.WriteHTTPError(w, ReasonUpstreamUnavailable, "")
}

// certificateCaller is the caller a request's verified client
// certificate names, as Kubernetes' x509 authenticator reads it: the
// common name is the username, each organization a group, and every
// such caller is in system:authenticated. Nil for a request that
// presents none.
func (s *Server) certificateCaller(r *http.Request) (*authn.Caller, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil, nil
	}
	cert := r.TLS.VerifiedChains[0][0]
	if cert.Subject.CommonName == "" {
		return nil, authn.Fail(authn.TokenInvalid, "the client certificate (serial %s) names no user: its common name is empty", cert.SerialNumber)
	}
	s.certCallers.Inc()
	groups := append(slices.Clone(cert.Subject.Organization), "system:authenticated")
	return &authn.Caller{Username: cert.Subject.CommonName, Groups: groups}, nil
}

// Registry is the proxy's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.health.Registry }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	lis, err := serve.ListenTCP("--listen", s.c.Serve.Listen)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	cfg := s.m.TLSConfig()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	if s.c.ClientCAs != nil {
		// Asked for, never required: a caller with a token presents none.
		// One presented must chain to --client-ca-file for client use, or
		// the handshake fails.
		cfg.ClientAuth, cfg.ClientCAs = tls.VerifyClientCertIfGiven, s.c.ClientCAs
	}
	s.m.ServeHTTP("proxy", lis, cfg, s.Handler())
	if err := s.serveDecisionLog(); err != nil {
		_ = lis.Close()
		return err
	}
	upstream := s.c.Upstream.String()
	if s.c.UnixSocket != "" {
		upstream = "unix://" + s.c.UnixSocket
	}
	s.m.Set("address", lis.Addr().String(), "upstream", upstream, "upstream_http2", s.c.UpstreamHTTP2,
		"authorization", s.c.Authorization, "client_certificates", s.c.ClientCAs != nil,
		"identity_assertion", s.asserter != nil, "pass_bearer_token", s.c.PassBearerToken, "gc_percent", gcPercent())
	if r := s.c.Roles; r != nil {
		s.m.Set("role_file", r.File)
	}
	if len(s.c.Bindings) > 0 {
		s.m.Set("caller_bindings", len(s.c.Bindings), "system_header", s.c.SystemHeader)
	}
	if r := s.c.RBAC; r != nil {
		s.m.Set("authorization_allow_ttl", r.access.AllowTTL.String(), "authorization_deny_ttl", r.access.DenyTTL.String(),
			"authorization_cache_max_entries", r.access.MaxEntries, "authorization_qps", r.access.QPS, "authorization_burst", r.access.Burst, "config_file", r.ConfigFile)
	}
	if err := s.m.Run(ctx); err != nil {
		_ = lis.Close()
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}
