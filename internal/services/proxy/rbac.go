package proxy

// Kubernetes RBAC for the proxy (--authorization rbac): the attributes
// --config-file makes of a request, its static entries, and
// SubjectAccessReviews with an allow cache and a deny cache — the guard's
// authorizer.

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/internal/foundation/kubeclient"
	"github.com/callerauth/callerauth/reason"
)

// accessConfig configures newAccessReviews.
type accessConfig struct {
	// AllowTTL and DenyTTL are how long an allowed and a denied answer are
	// reused: a removed grant is refused at most AllowTTL later, an added
	// one honoured at most DenyTTL later. Both required.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds the answers kept; beyond, the least recently used
	// is dropped. Required.
	MaxEntries int
	// Timeout bounds one review, its wait for the rate limiter included.
	// Required.
	Timeout time.Duration
	// QPS and Burst are the rate limit of the reviews sent. Required.
	QPS   float64
	Burst int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// accessReviews asks the API server whether a caller may make a request
// (SubjectAccessReview), each distinct review — the whole spec: user,
// uid, groups, extra and the attributes — answered at most once per TTL.
// Concurrent asks of one review share one request; an error is never
// kept, since it says nothing about the caller.
type accessReviews struct {
	client *kubeclient.Client
	cfg    accessConfig
	flight singleflight.Group

	mu      sync.Mutex
	entries map[[sha256.Size]byte]*list.Element
	lru     *list.List // of *accessEntry, most recent first

	hits, reviews, failures atomic.Uint64
}

type accessEntry struct {
	key     [sha256.Size]byte
	allowed bool
	reason  string
	expires time.Time
}

// accessAnswer is one review's outcome.
type accessAnswer struct {
	Allowed bool
	// Reason is the authorizer's, for the log (never sent to the caller).
	Reason string
	// Cached is set when the answer was kept from an earlier review.
	Cached bool
}

func newAccessReviews(rc *rest.Config, cfg accessConfig) (*accessReviews, error) {
	if cfg.AllowTTL <= 0 || cfg.DenyTTL <= 0 || cfg.MaxEntries <= 0 || cfg.Timeout <= 0 || cfg.QPS <= 0 || cfg.Burst <= 0 {
		return nil, fmt.Errorf("proxy: access reviews: the allow and deny TTLs, the entries, the timeout and the rate limit must be positive (%+v)", cfg)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = float32(cfg.QPS), cfg.Burst
	c, err := kubeclient.For(rc, authzv1.SchemeGroupVersion, authzv1.AddToScheme)
	if err != nil {
		return nil, fmt.Errorf("proxy: access reviews: %w", err)
	}
	return &accessReviews{client: c, cfg: cfg, entries: map[[sha256.Size]byte]*list.Element{}, lru: list.New()}, nil
}

// review answers spec, from the cache when an answer is kept and fresh.
func (a *accessReviews) review(ctx context.Context, spec authzv1.SubjectAccessReviewSpec) (accessAnswer, error) {
	b, err := json.Marshal(spec) // map keys sorted: one spec, one key
	if err != nil {
		return accessAnswer{}, err
	}
	key := sha256.Sum256(b)
	if ans, ok := a.lookup(key); ok {
		a.hits.Add(1)
		return ans, nil
	}
	v, err, _ := a.flight.Do(string(key[:]), func() (any, error) {
		if ans, ok := a.lookup(key); ok { // answered while this one waited
			return ans, nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Timeout)
		defer cancel()
		a.reviews.Add(1)
		out := &authzv1.SubjectAccessReview{}
		err := a.client.REST.Post().Resource("subjectaccessreviews").VersionedParams(&metav1.CreateOptions{}, a.client.Params).
			Body(&authzv1.SubjectAccessReview{Spec: spec}).Do(rctx).Into(out)
		if err != nil {
			a.failures.Add(1)
			return nil, fmt.Errorf("SubjectAccessReview: %w", err)
		}
		if out.Status.EvaluationError != "" && !out.Status.Allowed {
			// The authorizer could not decide: not a deny to keep.
			a.failures.Add(1)
			return nil, fmt.Errorf("SubjectAccessReview: evaluation error: %s", out.Status.EvaluationError)
		}
		allowed := out.Status.Allowed && !out.Status.Denied
		a.store(key, allowed, out.Status.Reason)
		return accessAnswer{Allowed: allowed, Reason: out.Status.Reason}, nil
	})
	if err != nil {
		return accessAnswer{}, err
	}
	return v.(accessAnswer), nil
}

func (a *accessReviews) lookup(key [sha256.Size]byte) (accessAnswer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	el, ok := a.entries[key]
	if !ok {
		return accessAnswer{}, false
	}
	e := el.Value.(*accessEntry)
	if !a.cfg.Now().Before(e.expires) {
		a.lru.Remove(el)
		delete(a.entries, key)
		return accessAnswer{}, false
	}
	a.lru.MoveToFront(el)
	return accessAnswer{Allowed: e.allowed, Reason: e.reason, Cached: true}, true
}

func (a *accessReviews) store(key [sha256.Size]byte, allowed bool, why string) {
	ttl := a.cfg.DenyTTL
	if allowed {
		ttl = a.cfg.AllowTTL
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if el, ok := a.entries[key]; ok {
		a.lru.Remove(el)
	}
	a.entries[key] = a.lru.PushFront(&accessEntry{key: key, allowed: allowed, reason: why, expires: a.cfg.Now().Add(ttl)})
	for a.lru.Len() > a.cfg.MaxEntries {
		last := a.lru.Back()
		a.lru.Remove(last)
		delete(a.entries, last.Value.(*accessEntry).key)
	}
}

// len is the answers kept.
func (a *accessReviews) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lru.Len()
}

// The reasons of --authorization rbac.
var (
	// ReasonRBACDenied: the API server's authorizer does not allow the
	// caller the request's attributes.
	ReasonRBACDenied = reason.New("rbac_denied", reason.PermissionDenied, "Kubernetes RBAC does not allow the caller this request")
	// ReasonRBACUnavailable: the SubjectAccessReview failed (unreachable,
	// timed out, or the authorizer could not decide); nothing is kept.
	ReasonRBACUnavailable = reason.New("rbac_unavailable", reason.Unavailable, "Kubernetes RBAC could not be asked about this request")
	// ReasonRBACAttributesInvalid: the request cannot be turned into the
	// attributes --config-file describes (no value, or too many, for its
	// rewrite); kube-rbac-proxy answers it 400.
	ReasonRBACAttributesInvalid = reason.New("rbac_attributes_invalid", reason.InvalidArgument, "the request does not carry what the proxy's authorization configuration needs")
)

// rewriteAttribute is the request attribute carrying the rewrite's
// values (the proxy's extractor reads them after authentication).
const rewriteAttribute = "rewrite"

// rbac is the guard's authorizer for --authorization rbac: every
// attribute a request makes must be allowed, by a static entry or by
// the API server.
type rbac struct {
	policy  attributesPolicy
	reviews *accessReviews
	static  atomic.Uint64
}

func (z *rbac) Reasons() []reason.Reason {
	return []reason.Reason{ReasonRBACDenied, ReasonRBACUnavailable, ReasonRBACAttributesInvalid}
}

func (z *rbac) Authorize(ctx context.Context, s binding.Subject, req binding.Request) *binding.Violation {
	c := s.Caller
	if c == nil {
		return &binding.Violation{Reason: ReasonRBACDenied, Detail: "no verified caller to ask RBAC about"}
	}
	method, urlPath, _ := strings.Cut(req.Method, " ")
	values, _ := req.Attribute(rewriteAttribute)
	specs, err := z.policy.attributes(method, urlPath, values)
	if err != nil {
		return &binding.Violation{Reason: ReasonRBACAttributesInvalid, Detail: err.Error()}
	}
	var extra map[string]authzv1.ExtraValue
	if len(c.Extra) > 0 {
		extra = make(map[string]authzv1.ExtraValue, len(c.Extra))
		for k, v := range c.Extra {
			extra[k] = v
		}
	}
	for _, spec := range specs {
		if z.policy.staticAllows(c.Username, spec) {
			z.static.Add(1)
			continue
		}
		spec.User, spec.UID, spec.Groups, spec.Extra = c.Username, c.UID, c.Groups, extra
		ans, err := z.reviews.review(ctx, spec)
		if err != nil {
			return &binding.Violation{Reason: ReasonRBACUnavailable, Detail: fmt.Sprintf("asking whether %s may %s: %v", c.Username, describe(spec), err)}
		}
		if !ans.Allowed {
			return &binding.Violation{Reason: ReasonRBACDenied, Detail: fmt.Sprintf("RBAC does not allow %s to %s (cached: %t): %s", c.Username, describe(spec), ans.Cached, ans.Reason)}
		}
	}
	return nil
}

// Collectors are the authorizer's metrics.
func (z *rbac) Collectors() []prometheus.Collector {
	a := z.reviews
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "proxy_authorization_" + name, Help: help}, func() float64 { return float64(f()) })
	}
	return []prometheus.Collector{
		counter("reviews_total", "SubjectAccessReviews sent to the API server (a cached answer sends none; concurrent asks of one review share one).", a.reviews.Load),
		counter("cache_hits_total", "Attributes answered from the allow or the deny cache.", a.hits.Load),
		counter("review_errors_total", "SubjectAccessReviews that failed or could not be decided (never cached): refused rbac_unavailable.", a.failures.Load),
		counter("static_allows_total", "Attributes a static entry of --config-file allowed, with no SubjectAccessReview.", z.static.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "proxy_authorization_cache_entries", Help: "Answers the allow and deny caches hold (at most --authorization-cache-max-entries)."},
			func() float64 { return float64(a.len()) }),
	}
}

func newRBAC(c RBACConfig) (*rbac, error) {
	rc, err := kubeclient.Load(c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("proxy: --authorization rbac: %w", err)
	}
	a, err := newAccessReviews(rc, c.access)
	if err != nil {
		return nil, err
	}
	return &rbac{policy: c.policy, reviews: a}, nil
}

// attributes are the rewrite's values of a request, for the guard to
// pass to Authorize (none without a rewrite).
func (z *rbac) attributes(r *http.Request) []binding.Attribute {
	if vs := z.policy.rewriteValues(r); len(vs) > 0 {
		return []binding.Attribute{{Key: rewriteAttribute, Values: vs}}
	}
	return nil
}
