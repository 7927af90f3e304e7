package proxy

// Kubernetes RBAC for the proxy: SubjectAccessReviews with an allow cache
// and a deny cache. (Not yet wired to a flag: the next step of issue 43
// gives the guard an asynchronous authorization stage for it.)

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/internal/foundation/kubeclient"
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
	// Timeout bounds one review. Required.
	Timeout time.Duration
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
	if cfg.AllowTTL <= 0 || cfg.DenyTTL <= 0 || cfg.MaxEntries <= 0 || cfg.Timeout <= 0 {
		return nil, fmt.Errorf("proxy: access reviews: the allow and deny TTLs, the entries and the timeout must be positive (%+v)", cfg)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
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
