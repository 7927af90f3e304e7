// Package kube authenticates bearer tokens with the Kubernetes TokenReview
// API: the API server (or the dev issuer, which speaks the same protocol)
// says whether the token is valid, for which audiences, and who it belongs
// to.
//
// The authenticator sends the required audiences and insists that one of
// them comes back in status.audiences; reads the pod and node binding and
// the credential id from user.extra, refusing an identity where any of them
// is ambiguous; and then reads iat and exp from the accepted token itself
// (TokenReview does not return them) and checks them without the API
// server's one-minute leeway. Transient failures are retried with backoff
// within the configured timeout, and every failure is mapped to one of the
// four authn classes.
//
// TokenReview sees revocation: a deleted pod's tokens are refused (after the
// API server's own short cache). Offline verification (authn/oidc) cannot.
//
// # The bound-object view
//
// The bound-object view ([Bound]) sees it without a review per token. It
// vouches only for what has reached its store, and proves it
// through the API server itself: every few seconds it asks, for each
// resource, a consistent list of one object (resourceVersion "", the
// watch's field selector) — the resource version R that list returns
// says how far the cluster had got when it was asked at T, and a
// consistent read also brings the API server's watch cache up to R. Once
// the store has applied a change, a list or a bookmark at R or later, the
// watch has delivered everything before T: the view is current as of T.
// Each watch is opened with a short server-side timeout, so that the API
// server's bookmark two seconds before the deadline carries the cache's
// progress even when nothing the view watches changed. The view answers
// while both resources were proven current within MaxWatchBreak and no
// watch has failed since: a watch that fails to open or ends before its
// deadline (a closed or reset connection, a refused dial, an API server
// restarting, an empty watch that client-go returns after its own
// retries, an error event), one still open past its deadline (replies
// swallowed), or a proof that fails stops the view at once until a proof
// begun after the failure completes. No token of an object deleted at t is
// accepted from the view after t + MaxWatchBreak, whatever the network
// does.
package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/kubeclient"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/reason"
	tokens "github.com/callerauth/callerauth/token"
)

// Defaults for [Config].
const (
	DefaultTimeout = 5 * time.Second
	DefaultQPS     = 100
	DefaultBurst   = 200
)

// Config configures [New].
type Config struct {
	// Kubeconfig is the path of a kubeconfig file. Empty: the in-cluster
	// configuration (the pod's service account), unless REST is set.
	Kubeconfig string
	// REST, when set, is used instead of Kubeconfig (QPS and Burst are still
	// applied to a copy).
	REST *rest.Config
	// Audiences the token must have been minted for; at least one is
	// required, and one of them must come back in status.audiences.
	Audiences []string
	// Timeout bounds one Authenticate call, retries included. Default 5s.
	Timeout time.Duration
	// QPS and Burst size the client's rate limiter for TokenReview load.
	// client-go's default of 5 QPS is far too low for a busy service.
	// Defaults 100 and 200.
	QPS   float32
	Burst int
	// Leeway is the clock skew allowed on the token's nbf and iat (the API
	// server has already checked them with its own minute). Default 0. exp
	// has none: a token is refused from its exp on, although the API server
	// itself allows a minute past it.
	Leeway time.Duration
	// Tenant, when set, is stated for every caller: a cluster is one tenant.
	Tenant string
	// Issuers, when set, are the iss values the API server's service-account
	// tokens carry: a token that is not a JWT, or names another issuer, is
	// refused locally without a TokenReview. Empty: any token is reviewed
	// (the API server may also accept tokens of other authenticators).
	Issuers []string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// MaxKeyAge, MaxStaleKeys and Logger configure [Offline]'s key cache
	// (oidc.Config's fields of the same names; their defaults).
	MaxKeyAge, MaxStaleKeys time.Duration
	Logger                  *slog.Logger
}

// Authenticator verifies tokens with TokenReview. Create one with [New]:
//
//	review, err := kube.New(kube.Config{
//		Kubeconfig: "",                     // in-cluster: the pod's service account
//		Audiences:  []string{"my-service"}, // required
//	})
//	auth := authn.NewCache(review, authn.CacheConfig{}) // one review per token per TTL
//
// The service account needs create on tokenreviews. [Offline] verifies
// the same tokens against the API server's keys instead, and [NewBound]
// adds the watch that refuses a deleted pod's token without a review.
type Authenticator struct {
	client    Reviewer
	audiences []string
	timeout   time.Duration
	leeway    time.Duration
	tenant    string
	now       func() time.Time
	issuers   []string
}

var _ authn.Authenticator = (*Authenticator)(nil)

// Layer is the authenticator as a layer (authn.Layer): its verdicts
// depend on its required audiences, and it never states roles, nor a
// tenant unless Config.Tenant gives one.
func (a *Authenticator) Layer() authn.Layer {
	return authn.Layer{Authenticator: a, Audiences: a.audiences, Lacks: a.Lacks}
}

// New builds the authenticator. A configuration it cannot honour is an
// error naming the setting.
func New(cfg Config) (*Authenticator, error) {
	if len(cfg.Audiences) == 0 {
		return nil, errors.New("kube: at least one audience is required: a token minted for another service must not be accepted")
	}
	for _, a := range cfg.Audiences {
		if a == "" {
			return nil, errors.New("kube: an audience may not be empty")
		}
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	if rc.QPS <= 0 {
		rc.QPS = DefaultQPS
	}
	if rc.Burst <= 0 {
		rc.Burst = DefaultBurst
	}
	rc.UserAgent = "callerauth"
	client, err := NewReviewer(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	return NewForClient(client, cfg), nil
}

// Reviewer creates TokenReviews. client-go's typed client satisfies it
// (clientset.AuthenticationV1().TokenReviews()), for a program that has
// a clientset already; [NewReviewer] makes one without the clientset's
// hundreds of packages.
type Reviewer interface {
	Create(ctx context.Context, review *authv1.TokenReview, opts metav1.CreateOptions) (*authv1.TokenReview, error)
}

// NewReviewer is a [Reviewer] over rc: a REST client of the
// authentication.k8s.io/v1 group alone, the request client-go's typed
// client makes. rc's rate limit (QPS, Burst) applies as it is.
func NewReviewer(rc *rest.Config) (Reviewer, error) {
	c, err := kubeclient.For(rc, authv1.SchemeGroupVersion, authv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return restReviewer{c}, nil
}

type restReviewer struct{ c *kubeclient.Client }

func (r restReviewer) Create(ctx context.Context, review *authv1.TokenReview, opts metav1.CreateOptions) (*authv1.TokenReview, error) {
	out := &authv1.TokenReview{}
	err := r.c.REST.Post().Resource("tokenreviews").VersionedParams(&opts, r.c.Params).Body(review).Do(ctx).Into(out)
	return out, err
}

// restConfig is cfg.REST, the kubeconfig's or the in-cluster config, as a
// copy.
func restConfig(cfg Config) (*rest.Config, error) {
	if cfg.REST != nil {
		return rest.CopyConfig(cfg.REST), nil
	}
	rc, err := kubeclient.Load(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	return rc, nil
}

// Offline verifies the API server's service-account tokens without asking
// it: against the keys it publishes at /openid/v1/jwks (fetched with the
// same client and credentials as TokenReview; the API server grants
// system:service-account-issuer-discovery to every service account by
// default), for cfg.Issuers and cfg.Audiences. It gives the identity
// TokenReview gives, but cannot see revocation; [authn.Recheck] pairs the
// two.
//
// Without cfg.Issuers, the issuer is learnt once, now, from the API
// server's own discovery document (/.well-known/openid-configuration): the
// issuer its new tokens carry. An API server configured with several
// issuers (a migration) publishes the first; name them all in cfg.Issuers
// to accept tokens of the others offline.
func Offline(cfg Config) (*oidc.Authenticator, error) {
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	base := strings.TrimSuffix(rc.Host, "/")
	names := cfg.Issuers
	if len(names) == 0 {
		iss, err := discoverIssuer(client, base, cmp.Or(cfg.Timeout, DefaultTimeout))
		if err != nil {
			return nil, err
		}
		names = []string{iss}
	}
	jwks := base + "/openid/v1/jwks"
	var issuers []oidc.IssuerConfig
	for _, iss := range names {
		// The same tenant as the reviewed path: one token, one caller.
		issuers = append(issuers, oidc.IssuerConfig{Issuer: iss, JWKSURL: jwks, Audiences: cfg.Audiences, HTTPClient: client, Tenant: cfg.Tenant})
	}
	leeway := cfg.Leeway
	if leeway == 0 {
		leeway = -1 // oidc reads 0 as its default; the reviewed path allows none
	}
	return oidc.New(oidc.Config{Issuers: issuers, Timeout: cfg.Timeout, Leeway: leeway, Now: cfg.Now,
		MaxKeyAge: cfg.MaxKeyAge, MaxStaleKeys: cfg.MaxStaleKeys, Logger: cfg.Logger})
}

// maxDiscovery bounds the API server's discovery document.
const maxDiscovery = 64 << 10

// discoverIssuer reads the issuer from the API server's discovery document.
func discoverIssuer(client *http.Client, base string, timeout time.Duration) (string, error) {
	where := base + "/.well-known/openid-configuration"
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("kube: learning the API server's service-account issuer from %s: %w (or name it: --caller-issuer)", where, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return fail(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("HTTP %d", resp.StatusCode))
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscovery+1))
	if err != nil {
		return fail(fmt.Errorf("reading it: %w", err))
	}
	if len(body) > maxDiscovery {
		return fail(fmt.Errorf("larger than %d bytes", maxDiscovery))
	}
	if err := ijson.Read(body, &doc); err != nil {
		return fail(fmt.Errorf("reading it: %w", err))
	}
	if u, err := url.Parse(doc.Issuer); err != nil || u.Scheme != "https" || u.Host == "" {
		return fail(fmt.Errorf("issuer %q is not an https:// URL", doc.Issuer))
	}
	return doc.Issuer, nil
}

// NewForClient builds the authenticator on an existing [Reviewer] (a
// clientset's AuthenticationV1().TokenReviews()). It does not check
// cfg.Audiences; [New] does.
func NewForClient(client Reviewer, cfg Config) *Authenticator {
	a := &Authenticator{client: client, audiences: slices.Clone(cfg.Audiences), timeout: cfg.Timeout, leeway: cfg.Leeway, tenant: cfg.Tenant, now: cfg.Now,
		issuers: slices.Clone(cfg.Issuers)}
	if a.timeout <= 0 {
		a.timeout = DefaultTimeout
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// Authenticate reviews the token.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*authn.Caller, error) {
	if token == "" || len(token) > tokens.MaxLength {
		return nil, authn.Fail(authn.TokenInvalid, "token is empty or longer than %d bytes", tokens.MaxLength)
	}
	if err := a.precheck(token); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	st, err := a.review(ctx, token)
	if err != nil {
		return nil, err
	}
	if !st.Authenticated {
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return nil, authn.Fail(authn.TokenInvalid, "TokenReview: %s", why)
	}
	return a.caller(st, token)
}

// precheck refuses, without asking the API server, a token that it would
// refuse anyway: a JWT past its exp or minted for none of the required
// audiences, and — when Issuers are configured — a token that is not a JWT
// or names another issuer. The claims are read unverified and used only to
// refuse, never to accept: a flood of such tokens costs no TokenReview.
func (a *Authenticator) precheck(token string) error {
	claims, err := tokens.ReadClaims(token)
	if err != nil {
		if len(a.issuers) > 0 {
			return authn.Fail(authn.TokenInvalid, "refused without review: not a service-account JWT (%v)", err)
		}
		return nil // another authenticator of the API server may know it
	}
	if len(a.issuers) > 0 && !slices.Contains(a.issuers, claims.Issuer) {
		return authn.Fail(authn.TokenInvalid, "refused without review: iss %q is not %q", claims.Issuer, a.issuers)
	}
	if exp := claims.ExpiresAt(); !exp.IsZero() && !a.now().Before(exp) {
		return authn.Fail(authn.TokenInvalid, "refused without review: token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if len(claims.Audience) > 0 && len(authn.Intersect(a.audiences, claims.Audience)) == 0 {
		return authn.Fail(authn.TokenInvalid, "refused without review: token audiences %q include none of %q", []string(claims.Audience), a.audiences)
	}
	return nil
}

func (a *Authenticator) caller(st *authv1.TokenReviewStatus, token string) (*authn.Caller, error) {
	matched := authn.Intersect(a.audiences, st.Audiences)
	if len(matched) == 0 {
		return nil, authn.Fail(authn.TokenInvalid, "TokenReview did not confirm any required audience %q (status.audiences %q)", a.audiences, st.Audiences)
	}
	if st.User.Username == "" {
		return nil, authn.Fail(authn.ValidatorError, "TokenReview authenticated a token but named no user")
	}
	c := &authn.Caller{
		Username:  st.User.Username,
		UID:       st.User.UID,
		Groups:    slices.Clone(st.User.Groups),
		Audiences: matched,
		Tenant:    a.tenant,
	}
	for key, dst := range map[string]*string{
		authn.ExtraPodName: &c.PodName, authn.ExtraPodUID: &c.PodUID,
		authn.ExtraNodeName: &c.NodeName, authn.ExtraNodeUID: &c.NodeUID,
		authn.ExtraCredentialID: &c.CredentialID,
	} {
		switch v := st.User.Extra[key]; len(v) {
		case 0:
		case 1:
			*dst = v[0]
		default:
			return nil, authn.Fail(authn.ValidatorError, "TokenReview user.extra %s has %d values; refusing an ambiguous identity", key, len(v))
		}
	}
	// TokenReview does not return the token's times: read them from the
	// token it has just accepted.
	if claims, err := tokens.ReadClaims(token); err == nil {
		c.Issuer, c.IssuedAt, c.Expiry = claims.Issuer, claims.Issued(), claims.ExpiresAt()
		if err := authn.CheckLifetime(claims, a.now(), a.leeway); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// tracerName names the backend's spans.
const tracerName = "github.com/callerauth/callerauth/authn/kube"

// review creates the TokenReview, retrying transient failures with
// jittered exponential backoff until ctx ends, in a span of its own
// (callerauth.token_review: whether the API server authenticated the
// token, or the failure's class; never the token or the user).
func (a *Authenticator) review(ctx context.Context, token string) (*authv1.TokenReviewStatus, error) {
	ctx, span := spans.Start(ctx, tracerName, "callerauth.token_review", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	st, err := a.reviewRetrying(ctx, token)
	if span.IsRecording() {
		var ae *authn.Error
		switch {
		case err == nil:
			span.SetAttributes(attribute.Bool("callerauth.authenticated", st.Authenticated))
		case errors.As(err, &ae):
			span.SetAttributes(attribute.String("callerauth.reason", ae.Reason.String()))
			spans.Fail(span, "TokenReview failed: "+ae.Reason.String())
		default:
			spans.Fail(span, "TokenReview failed")
		}
	}
	return st, err
}

func (a *Authenticator) reviewRetrying(ctx context.Context, token string) (*authv1.TokenReviewStatus, error) {
	tr := &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: token, Audiences: a.audiences}}
	backoff := 50 * time.Millisecond
	var answered reason.Reason // the class of the validator's last own answer
	for attempt := 1; ; attempt++ {
		res, err := a.client.Create(ctx, tr, metav1.CreateOptions{})
		if err == nil {
			return &res.Status, nil
		}
		class, transient := classify(ctx, err)
		if ctx.Err() != nil && !answered.IsZero() {
			// Our own deadline cut this attempt short, after the validator
			// had already answered: its answer is the class, not how many
			// retries happened to fit (which a loaded machine changes).
			return nil, &authn.Error{Reason: answered, Err: fmt.Errorf("TokenReview (attempt %d, out of time; earlier attempts: %s): %w", attempt, answered, err)}
		}
		answered = class
		if !transient {
			return nil, &authn.Error{Reason: class, Err: fmt.Errorf("TokenReview (attempt %d): %w", attempt, err)}
		}
		wait := backoff/2 + rand.N(backoff/2+1) //nolint:gosec // jitter needs no cryptographic randomness.
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil, &authn.Error{Reason: class, Err: fmt.Errorf("TokenReview (attempt %d, no time left to retry): %w", attempt, err)}
		}
		select {
		case <-ctx.Done():
			// Out of time between attempts: the validator's last answer is
			// the verdict's class, not the wait.
			return nil, &authn.Error{Reason: class, Err: fmt.Errorf("TokenReview (attempt %d, out of time to retry): %w", attempt, err)}
		case <-time.After(wait):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// classify maps a TokenReview error to a class, and says whether it is
// worth retrying.
func classify(ctx context.Context, err error) (reason.Reason, bool) {
	var netErr net.Error
	switch {
	case isClientThrottled(err):
		// Our own client-side rate limiter (QPS/Burst) would not let the
		// review out in time: the validator was never asked, so this says
		// nothing about the caller — unavailable, not the validator's error.
		return authn.ValidatorUnavailable, false
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) || isDNS(err):
		// Nothing listens: unavailable, whatever time is left.
		return authn.ValidatorUnavailable, true
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return authn.ValidatorTimeout, false
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return authn.ValidatorTimeout, true
	case apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err):
		return authn.ValidatorUnavailable, true
	case apierrors.IsInternalError(err) || isStatus(err, 500, 502):
		return authn.ValidatorError, true
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return authn.ValidatorError, false
	case errors.As(err, &netErr) && netErr.Timeout():
		return authn.ValidatorTimeout, true
	case errors.Is(err, syscall.ECONNRESET) || isConnectionError(err):
		return authn.ValidatorUnavailable, true
	default:
		return authn.ValidatorError, false
	}
}

// isClientThrottled reports client-go's refusal to send a request its rate
// limiter holds back ("client rate limiter Wait returned an error: rate:
// Wait(n=1) would exceed context deadline"). client-go wraps the limiter's
// error, which wraps nothing, so the text is all there is to go on.
func isClientThrottled(err error) bool {
	return strings.Contains(err.Error(), "client rate limiter Wait returned an error")
}

func isStatus(err error, codes ...int32) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	return slices.Contains(codes, se.Status().Code)
}

func isDNS(err error) bool {
	var d *net.DNSError
	return errors.As(err, &d)
}

// isConnectionError reports transport-level failures that client-go wraps
// in *url.Error (TLS handshake failures, EOF from a dropped connection).
func isConnectionError(err error) bool {
	var ue *url.Error
	var op *net.OpError
	return errors.As(err, &op) || (errors.As(err, &ue) && !apierrors.IsBadRequest(err))
}

// Lacks says what TokenReview never states (authn.Layer.Lacks): roles — a
// TokenReview gives a username, a UID, groups and extra values, never
// roles — and the tenant unless Config.Tenant states one for every caller.
func (a *Authenticator) Lacks(f authn.Fact) string {
	switch {
	case f == authn.FactRoles:
		return "TokenReview states no roles (it gives a username, a UID, groups and extra values)"
	case f == authn.FactTenant && a.tenant == "":
		return "TokenReview states no tenant (kube.Config.Tenant is empty)"
	}
	return ""
}
