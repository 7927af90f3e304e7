// Package guard turns a request's credential into a verdict: bearer →
// authenticator → binding rules → mode → allowed, or refused with a stable
// reason and the code it travels as. It counts every decision in Prometheus
// metrics, logs one structured line per decision (never the token), and puts
// the verified caller and the granted scope in the request context.
//
// gRPC interceptors ([Guard.UnaryServerInterceptor],
// [Guard.StreamServerInterceptor]) and HTTP middleware ([Guard.Middleware])
// are thin over [Guard.Check].
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/reason"
)

// Mode says what happens after a violation is detected.
type Mode string

// Modes.
const (
	// Enforce rejects a violating request.
	Enforce Mode = "enforce"
	// Audit validates every request and records every violation exactly as
	// enforce would, but lets the request through. (missing_node_name is
	// rejected in both modes.)
	Audit Mode = "audit"
)

// ParseMode reads a mode, the one reader of every service's mode setting
// (the connector's config.json, the pdp's --caller-auth-mode, whose "warn"
// is its name for audit): "enforce" or "audit", nothing else, in no other
// case.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Enforce, Audit:
		return Mode(s), nil
	default:
		return "", fmt.Errorf("mode %q: want enforce or audit", s)
	}
}

// Config configures [New].
type Config struct {
	// Mode is Enforce (default) or Audit.
	Mode Mode
	// FailOpenOnUnavailable lets a request whose verification failed with
	// validator_unavailable or validator_timeout — never token_invalid or
	// validator_error — continue as a degraded subject, which rules treat
	// as a guess, not an identity (a degraded node-local scope for node
	// binding). Default false: an unreachable validator rejects.
	FailOpenOnUnavailable bool
	// Authenticator verifies tokens: a layer (authn.Layer) that states
	// what it never states (Lacks: a rule reading such a fact is refused
	// here) and whether a verdict came from memory (Cached: the verdict
	// cache's Layer, for the metrics and the log). Required: a verdict
	// cache's Layer (authn.NewCache(...).Layer()), or authn.Layer{Authenticator: a}.
	Authenticator authn.Layer
	// Rule judges verified (or tokenless, or degraded) subjects. Required.
	Rule binding.Rule
	// Authorizer, optional, judges what Rule allowed, asking another
	// service when it must (Kubernetes RBAC through SubjectAccessReview);
	// its refusals are counted, logged and audited as the rule's.
	Authorizer Authorizer
	// Metrics, optional.
	Metrics *Metrics
	// Logger gets one line per decision. Default slog.Default().
	Logger *slog.Logger
	// Backend names the authenticator in each authentication's span
	// (callerauth.backend: tokenreview, oidc); empty: not named.
	Backend string
	// Tracer, when set, records a span of each authentication and each
	// verdict, children of the request's span when that one records
	// (docs/monitoring.md "Traces"). Nil: none.
	Tracer trace.Tracer
}

// Authorizer is a judgement made after the rule allowed a request, one
// that may wait on another service: Kubernetes RBAC through
// SubjectAccessReview (callerauth-proxy's --authorization rbac). It sees
// every subject the rule let through — a degraded one, with no caller,
// included — and must refuse what it cannot judge.
type Authorizer interface {
	// Authorize returns nil to allow, or the violation. ctx is the
	// request's.
	Authorize(ctx context.Context, s binding.Subject, req binding.Request) *binding.Violation
	// Reasons are every reason Authorize returns, for the counters and
	// the docs.
	Reasons() []reason.Reason
}

// Guard is the enforcement pipeline: it reads the credential, verifies it
// with its Authenticator, asks its Rule, and refuses with a stable reason.
// It is safe for concurrent use.
//
//	g, err := guard.New(guard.Config{
//		Authenticator: authn.NewCache(review.Layer(), authn.CacheConfig{}).Layer(), // review: kube.New(...)
//		Rule: binding.Roles(binding.RoleConfig{
//			Required: map[string]string{"Check": "reader"},
//			Grants:   []binding.RoleGrant{{Role: "reader", ServiceAccounts: []string{"demo:client"}}},
//		}),
//	})
//	// gRPC: every call, and every stream at its start.
//	srv := grpc.NewServer(grpc.Creds(tlsCreds),
//		grpc.UnaryInterceptor(g.UnaryServerInterceptor(nil)),
//		grpc.StreamInterceptor(g.StreamServerInterceptor()))
//	// HTTP: the method and path judged ("GET /hello").
//	mux.Handle("GET /hello", g.Middleware(nil, guard.RequireIdentity())(hello))
//
// In the handler, [FromContext] gives the verdict and its verified caller.
type Guard struct {
	cfg Config
	log *slog.Logger
}

// New validates the configuration and returns the guard.
func New(cfg Config) (*Guard, error) {
	var errs []error
	if cfg.Mode == "" {
		cfg.Mode = Enforce
	}
	if cfg.Mode != Enforce && cfg.Mode != Audit {
		errs = append(errs, fmt.Errorf("guard: mode %q: want enforce or audit", cfg.Mode))
	}
	if cfg.Authenticator.Authenticator == nil {
		errs = append(errs, errors.New("guard: an authenticator is required"))
	}
	if cfg.Rule == nil {
		errs = append(errs, errors.New("guard: a rule is required"))
	}
	if cfg.Rule != nil {
		if err := binding.Validate(cfg.Rule); err != nil {
			errs = append(errs, fmt.Errorf("guard: %w", err))
		}
	}
	if cfg.Rule != nil && cfg.Authenticator.Authenticator != nil {
		// A rule that reads what the backend never states would refuse
		// every call: say so now, naming both.
		for _, n := range binding.Needs(cfg.Rule) {
			if why := cfg.Authenticator.Lacking(n.Fact); why != "" {
				errs = append(errs, fmt.Errorf("guard: %s, but %s: no call could pass%s", n.Why, why, remedy(n.Fact)))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	g := &Guard{cfg: cfg, log: cfg.Logger}
	if g.log == nil {
		g.log = slog.Default()
	}
	return g, nil
}

// remedy says how a rule gets a fact its backend never states.
func remedy(f authn.Fact) string {
	switch f {
	case authn.FactRoles:
		return " (give roles by username, group, service account or extra value with binding.RoleConfig.Grants)"
	case authn.FactTenant:
		return " (state one tenant for every caller with kube.Config.Tenant, or verify with an issuer that states it)"
	}
	return ""
}

// Mode returns the mode the guard runs in.
func (g *Guard) Mode() Mode { return g.cfg.Mode }

// Verdict is the outcome of one request.
type Verdict struct {
	// Allowed says whether the request reaches the handler.
	Allowed bool
	// Reason is the violation's reason, the zero Reason when there was
	// none; its code is how a refusal travels (or would have, under
	// audit). Under audit an allowed request can carry a reason: what
	// enforce would have done.
	Reason reason.Reason
	// Detail explains the violation, for logs only.
	Detail string
	// Metadata travels with a refusal (the gRPC ErrorInfo), e.g. the role
	// a method requires.
	Metadata map[string]string
	// Caller is the verified identity, nil when none.
	Caller *authn.Caller
	// Degraded is set when verification failed open.
	Degraded bool
	// Grant is what the rule granted beyond "allowed" (node binding's
	// *binding.NodeGrant), nil for none. Under audit a request let through
	// despite a violation carries the grant it would have had.
	Grant binding.Grant
	// Cached is set when the verification came from the verdict cache.
	Cached bool
	// Mode the verdict was reached in.
	Mode Mode
	// System is the system the request asked to speak for, as the rules
	// judged it; "" when it was refused before it was read.
	System string
}

// Check judges one request: the credential as bearer read it, and what the
// request asks to say. It is [Guard.Authenticate] followed by
// [Guard.Decide].
func (g *Guard) Check(ctx context.Context, cred bearer.Credential, req binding.Request) *Verdict {
	d := new(decided)
	g.authenticate(ctx, cred, &d.a)
	return g.decide(ctx, &d.a, req, &d.v)
}

// decided holds a request's authentication and verdict in one allocation
// (the verdict outlives the request handler's frame in its context).
type decided struct {
	a Authentication
	v Verdict
}

// Authentication is what a credential proved, before any rule looked at
// the request: the first half of [Guard.Check]. A service that must read
// the request to judge it (an HTTP body) authenticates first, from the
// header alone, and refuses a caller with no identity before it reads a
// byte of the body.
type Authentication struct {
	subject  binding.Subject
	viol     *binding.Violation
	err      error
	absent   bool
	cached   bool
	degraded bool
}

// Caller is the verified identity, nil when the credential proved none.
func (a *Authentication) Caller() *authn.Caller { return a.subject.Caller }

// Reason is why there is no identity: token_missing when no credential was
// presented, malformed_credentials, or the authenticator's class; the zero
// Reason when the caller was verified.
func (a *Authentication) Reason() reason.Reason {
	switch {
	case a.viol != nil:
		return a.viol.Reason
	case a.absent:
		return binding.ReasonTokenMissing
	}
	return reason.Reason{}
}

// Err is the authenticator's or the header's error, for the log.
func (a *Authentication) Err() error { return a.err }

// Identify is the request-level authentication step every front door
// shares — the guard, the demo, the attack matrix: the credential bearer
// read off the request, verified by auth. Nothing is counted or logged.
func Identify(ctx context.Context, auth authn.Layer, cred bearer.Credential) *Authentication {
	a := &Authentication{}
	identify(ctx, &auth, cred, a)
	return a
}

func identify(ctx context.Context, auth *authn.Layer, cred bearer.Credential, a *Authentication) {
	switch cred.Kind {
	case bearer.Absent:
		a.absent = true
	case bearer.Malformed:
		a.err = errors.New(cred.Problem)
		a.viol = &binding.Violation{Reason: bearer.ReasonMalformed, Detail: cred.Problem}
	case bearer.Token:
		caller, cached, err := auth.Verify(ctx, cred.Token)
		a.cached = cached
		if err != nil {
			a.err = err
			a.viol = &binding.Violation{Reason: authn.ReasonOf(err), Detail: err.Error()}
		} else {
			a.subject.Caller = caller
		}
	}
}

// Authenticate verifies the credential ([Identify]) and applies
// FailOpenOnUnavailable. Nothing is counted or logged until
// [Guard.Decide], which must follow (also for a refusal), so that every
// request is counted and logged exactly once.
func (g *Guard) Authenticate(ctx context.Context, cred bearer.Credential) *Authentication {
	a := &Authentication{}
	g.authenticate(ctx, cred, a)
	return a
}

func (g *Guard) authenticate(ctx context.Context, cred bearer.Credential, a *Authentication) {
	ctx, span := g.startSpan(ctx, "callerauth.authenticate")
	defer endAuthentication(span, a, g.cfg.Backend)
	identify(ctx, &g.cfg.Authenticator, cred, a)
	if a.viol != nil && cred.Kind == bearer.Token && g.cfg.FailOpenOnUnavailable && authn.SaysNothingAboutCaller(authn.ReasonOf(a.err)) {
		// The request goes on as a degraded subject; Decide counts the
		// validator's reason as the violation it is.
		a.subject = binding.Subject{Degraded: true, DegradedReason: authn.ReasonOf(a.err)}
		a.degraded = true
	}
}

// Decide judges the request of an authenticated credential: the rules, the
// mode, the metrics and the log line. It is the second half of
// [Guard.Check].
func (g *Guard) Decide(ctx context.Context, a *Authentication, req binding.Request) *Verdict {
	return g.decide(ctx, a, req, new(Verdict))
}

func (g *Guard) decide(ctx context.Context, a *Authentication, req binding.Request, v *Verdict) *Verdict {
	ctx, span := g.startSpan(ctx, "callerauth.decide")
	defer endVerdict(span, v)
	*v = Verdict{Mode: g.cfg.Mode, Cached: a.cached, Caller: a.subject.Caller, System: req.System}
	viol := a.viol
	if a.degraded {
		// Counted now, as the violation it is; the rules then judge the
		// degraded subject.
		g.cfg.Metrics.violation(viol.Reason)
		v.Degraded, v.Reason, v.Detail = true, viol.Reason, viol.Detail
		viol = nil
	}
	if viol == nil {
		v.Grant, viol = g.cfg.Rule.Check(a.subject, req)
		if viol == nil && g.cfg.Authorizer != nil {
			viol = g.cfg.Authorizer.Authorize(ctx, a.subject, req)
		}
	} else if g.cfg.Mode == Audit {
		// The credential failed before the rules could grant anything.
		// Under audit the request goes through, with the grant a caller
		// with no token would get (pinned to the local node, where there
		// is one).
		v.Grant, _ = g.cfg.Rule.Check(binding.Subject{}, req)
	}
	if viol != nil {
		v.Reason, v.Detail, v.Metadata = viol.Reason, viol.Detail, viol.Metadata
		if !viol.Counted {
			g.cfg.Metrics.violation(viol.Reason)
		}
		v.Allowed = g.cfg.Mode == Audit && !viol.Always
	} else {
		v.Allowed = true
	}
	if v.Grant != nil {
		v.Grant.Decided(v.Allowed)
	}
	g.logDecision(ctx, v, req)
	return v
}

func (g *Guard) logDecision(ctx context.Context, v *Verdict, req binding.Request) {
	// Clean allows are logged at info (a service's default: one line per
	// decision; --log-level warn keeps refusals alone), refusals and
	// audited violations at warn; nothing is built for a level that is off.
	level, msg := slog.LevelInfo, "allowed"
	if !v.Reason.IsZero() {
		level, msg = slog.LevelWarn, "refused"
		if v.Allowed {
			msg = "violation let through (audit)"
			if v.Degraded {
				msg = "validator unavailable: degraded scope"
			}
		}
	}
	if !g.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs, slog.Bool("allowed", v.Allowed), slog.String("mode", string(v.Mode)), slog.Bool("cached", v.Cached))
	str := func(k, v string) slog.Attr { return slog.String(k, LogValue(v)) }
	if c := v.Caller; c != nil {
		attrs = append(attrs, str("caller", c.Username))
		if c.PodName != "" {
			attrs = append(attrs, str("pod", c.PodName))
		}
		if c.NodeName != "" {
			attrs = append(attrs, str("node_claim", c.NodeName))
		}
		if c.Tenant != "" {
			attrs = append(attrs, str("tenant", c.Tenant))
		}
	}
	if v.Degraded {
		attrs = append(attrs, slog.Bool("degraded", true))
	}
	if v.Grant != nil {
		attrs = append(attrs, v.Grant.LogAttrs()...)
	}
	if req.Method != "" {
		attrs = append(attrs, str("method", req.Method))
	}
	if req.System != "" {
		attrs = append(attrs, str("system", req.System))
	}
	if !v.Reason.IsZero() {
		attrs = append(attrs, slog.String("reason", v.Reason.String()), slog.String("code", v.Reason.Code().String()), str("detail", v.Detail))
	}
	g.log.LogAttrs(ctx, level, "callerauth: "+msg, attrs...)
}

// MaxLogValue is how many bytes of one request-supplied value a log line
// carries. Requests come from callers who may not be authenticated: a
// 60 KB "system" must not become a 60 KB log line.
const MaxLogValue = 256

// LogValue bounds a request-supplied string for a log line: longer than
// MaxLogValue bytes, it is cut at a character boundary and marked with the
// length it had.
func LogValue(s string) string {
	if len(s) <= MaxLogValue {
		return s
	}
	cut := MaxLogValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[truncated, " + strconv.Itoa(len(s)) + " bytes]"
}

type verdictKey struct{}

// NewContext returns ctx carrying the verdict.
func NewContext(ctx context.Context, v *Verdict) context.Context {
	return context.WithValue(ctx, verdictKey{}, v)
}

// FromContext returns the verdict a guard put in the request context.
func FromContext(ctx context.Context) (*Verdict, bool) {
	v, ok := ctx.Value(verdictKey{}).(*Verdict)
	return v, ok
}
