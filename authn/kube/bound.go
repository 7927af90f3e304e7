package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/callerauth/callerauth/authn"
)

// Bound verifies Kubernetes service-account tokens offline and checks,
// from a watch instead of a TokenReview, that what a token is bound to
// still exists with the UID the token names: its service account and, for
// a pod-bound token, its pod. That is the lookup a TokenReview adds to an
// offline verification, kept by the service itself the way a kubelet
// watches the pods of its node: at steady state no TokenReview is sent,
// and a deleted pod's token is refused as soon as the watch delivers the
// deletion.
//
// The watches are metadata-only (PartialObjectMetadata) and as narrow as
// the configuration allows: with NodeName, only the pods of that node. A
// token the view cannot answer for — bound to a secret or only to a node,
// or to a pod of another node than the one watched — and every token while
// the view has not synced, or while a watch has been failing for longer
// than MaxWatchBreak, is reviewed instead: correctness never rests on a
// stale view.
//
// Whether the view is current is known from the watches themselves: each
// watch connection is observed from the moment it opens until its result
// channel closes. The view answers while both watches are open, and for at
// most MaxWatchBreak after one closed (the reflector re-watches from the
// last resource version, so a short break loses no event); longer, or
// before the first sync, every token is reviewed. A connection the network
// drops without a word is closed by client-go's HTTP/2 health check (a ping
// after 30 s without a frame, 15 s to answer), so a silent break is seen
// within 45 s plus MaxWatchBreak.
type Bound struct {
	offline, review authn.Authenticator
	nodeName        string
	maxBreak        time.Duration
	now             func() time.Time

	pods, accounts *watched

	stats boundCounters
}

// watched is one metadata informer and what is known of its watch.
type watched struct {
	resource string
	inf      cache.SharedIndexInformer

	now  func() time.Time
	held atomic.Int64 // objects in the store, kept by the event handlers (no list per scrape)

	mu       sync.Mutex
	open     int       // watch connections open now (0 or 1)
	closedAt time.Time // when the last one closed (or the view was made)
	dead     tombstones
}

// DefaultMaxWatchBreak is how long the view answers after a watch closed.
const DefaultMaxWatchBreak = 10 * time.Second

// BoundConfig configures [NewBound].
type BoundConfig struct {
	// Metadata is the client the watches use (metadata.NewForConfigOrDie
	// of the REST config TokenReview uses). Required.
	Metadata metadata.Interface
	// Offline verifies signature, issuer, audience and expiry (kube.Offline).
	// Review is the fallback (the TokenReview authenticator). Both required.
	Offline, Review authn.Authenticator
	// NodeName, when set, narrows the pod watch to the pods of that node
	// (field selector spec.nodeName), as a node agent needs; tokens bound
	// to pods of other nodes are reviewed.
	NodeName string
	// MaxWatchBreak is how long the view still answers after a watch
	// connection closed and before it is open again; past it, every token
	// is reviewed until it is. Default DefaultMaxWatchBreak.
	MaxWatchBreak time.Duration
	// Tombstones is how long the UID of an object the watch saw deleted is
	// remembered, so that its tokens are refused without a review; after
	// it, such a token is reviewed (and refused by the API server). At most
	// MaxTombstones per resource are kept, the oldest forgotten first.
	// Defaults 1 h and 65,536.
	Tombstones    time.Duration
	MaxTombstones int
	// Resync is the informers' resync period. Default 10 minutes.
	Resync time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// BoundStats count what [Bound] did and say what its view holds.
type BoundStats struct {
	// Answered are tokens accepted from the view.
	Answered uint64
	// Gone are tokens refused because what they are bound to is gone.
	Gone uint64
	// Unsynced, Broken, Unanswerable and Unknown are the tokens sent to
	// TokenReview because the view had not synced yet, because a watch had
	// been closed for longer than MaxWatchBreak, because the view cannot
	// answer for that token (bound to no pod, or to a pod of another node),
	// or because the view does not know the object the token names (created
	// after the view's last event, or deleted before the view began).
	Unsynced, Broken, Unanswerable, Unknown uint64
	// Pods and ServiceAccounts are the objects the view holds.
	Pods, ServiceAccounts int
	// Synced: both watches have listed once.
	Synced bool
	// Lag is how far behind the view may be: zero while both watches are
	// open, else the time since the first of them closed.
	Lag time.Duration
}

// Reviewed are all the tokens sent to TokenReview.
func (s BoundStats) Reviewed() uint64 { return s.Unsynced + s.Broken + s.Unanswerable + s.Unknown }

type boundCounters struct{ answered, gone, unsynced, broken, unanswerable, unknown atomic.Uint64 }

var (
	podsResource     = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	accountsResource = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
)

// NewBound builds the view's informers; [Bound.Start] runs them.
func NewBound(cfg BoundConfig) (*Bound, error) {
	switch {
	case cfg.Metadata == nil:
		return nil, errors.New("kube: the bound-object view needs a metadata client")
	case cfg.Offline == nil || cfg.Review == nil:
		return nil, errors.New("kube: the bound-object view needs an offline verifier and a reviewer")
	}
	if cfg.MaxWatchBreak <= 0 {
		cfg.MaxWatchBreak = DefaultMaxWatchBreak
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tombstones <= 0 {
		cfg.Tombstones = time.Hour
	}
	if cfg.MaxTombstones <= 0 {
		cfg.MaxTombstones = 1 << 16
	}
	b := &Bound{offline: cfg.Offline, review: cfg.Review, nodeName: cfg.NodeName, maxBreak: cfg.MaxWatchBreak, now: cfg.Now}
	var podSelector string
	if cfg.NodeName != "" {
		podSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}
	var err error
	if b.pods, err = b.watch(cfg, podsResource, podSelector); err != nil {
		return nil, err
	}
	if b.accounts, err = b.watch(cfg, accountsResource, ""); err != nil {
		return nil, err
	}
	return b, nil
}

// watch makes a metadata informer of resource whose watch connections are
// observed: open from a successful Watch call until the result channel
// closes.
func (b *Bound) watch(cfg BoundConfig, gvr schema.GroupVersionResource, fieldSelector string) (*watched, error) {
	w := &watched{resource: gvr.Resource, now: b.now, closedAt: b.now(),
		dead: tombstones{ttl: cfg.Tombstones, limit: cfg.MaxTombstones, at: map[string]time.Time{}}}
	res := cfg.Metadata.Resource(gvr).Namespace(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fieldSelector
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fieldSelector
			iw, err := res.Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			w.opened()
			return observe(iw, func() { w.closed(b.now()) }), nil
		},
	}
	w.inf = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, cfg.Metadata), &metav1.PartialObjectMetadata{}, cfg.Resync, cache.Indexers{})
	if err := w.inf.SetTransform(slim); err != nil {
		return nil, fmt.Errorf("kube: watching %s: %w", gvr.Resource, err)
	}
	_, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { w.held.Add(1) },
		UpdateFunc: func(old, cur any) {
			if u := uidOf(old); u != uidOf(cur) {
				w.bury(u, b.now())
			}
		},
		DeleteFunc: func(obj any) {
			w.held.Add(-1)
			w.bury(uidOf(obj), b.now())
		},
	})
	if err != nil {
		return nil, fmt.Errorf("kube: watching %s: %w", gvr.Resource, err)
	}
	return w, nil
}

func (w *watched) opened() {
	w.mu.Lock()
	w.open++
	w.mu.Unlock()
}

func (w *watched) closed(now time.Time) {
	w.mu.Lock()
	w.open--
	w.closedAt = now
	w.mu.Unlock()
}

// brokenFor is how long no watch has been open: zero while one is.
func (w *watched) brokenFor(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open > 0 {
		return 0
	}
	return max(now.Sub(w.closedAt), time.Nanosecond)
}

// observed passes a watch's events on and calls closed once, when the
// watch's result channel closes or the watch is stopped.
type observed struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func observe(inner watch.Interface, closed func()) watch.Interface {
	o := &observed{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(o.out)
		defer closed()
		for {
			select {
			case ev, ok := <-inner.ResultChan():
				if !ok {
					return
				}
				select {
				case o.out <- ev:
				case <-o.stop:
					return
				}
			case <-o.stop:
				return
			}
		}
	}()
	return o
}

func (o *observed) ResultChan() <-chan watch.Event { return o.out }

func (o *observed) Stop() {
	o.once.Do(func() {
		close(o.stop)
		o.inner.Stop()
	})
}

// Start runs the watches until ctx ends.
func (b *Bound) Start(ctx context.Context) error {
	go b.pods.inf.RunWithContext(ctx)
	go b.accounts.inf.RunWithContext(ctx)
	<-ctx.Done()
	return nil
}

// synced reports whether both watches have listed once.
func (b *Bound) synced() bool { return b.pods.inf.HasSynced() && b.accounts.inf.HasSynced() }

// lag is how long the longer-broken watch has been closed: zero while both
// are open.
func (b *Bound) lag() time.Duration {
	now := b.now()
	return max(b.pods.brokenFor(now), b.accounts.brokenFor(now))
}

// Healthy reports whether the view answers: both watches synced, and
// neither closed for longer than MaxWatchBreak.
func (b *Bound) Healthy() bool { return b.synced() && b.lag() <= b.maxBreak }

// Stats returns the counts so far and the view's state.
func (b *Bound) Stats() BoundStats {
	return BoundStats{
		Answered: b.stats.answered.Load(), Gone: b.stats.gone.Load(),
		Unsynced: b.stats.unsynced.Load(), Broken: b.stats.broken.Load(), Unanswerable: b.stats.unanswerable.Load(), Unknown: b.stats.unknown.Load(),
		Pods: int(b.pods.held.Load()), ServiceAccounts: int(b.accounts.held.Load()),
		Synced: b.synced(), Lag: b.lag(),
	}
}

// RequiredAudiences are the reviewer's, for the verdict cache's key.
func (b *Bound) RequiredAudiences() []string {
	if a, ok := b.review.(authn.Audienced); ok {
		return a.RequiredAudiences()
	}
	return nil
}

// Authenticate verifies the token offline, then checks its bound objects
// in the view — or reviews it when the view cannot answer.
func (b *Bound) Authenticate(ctx context.Context, token string) (*authn.Caller, error) {
	c, err := b.offline.Authenticate(ctx, token)
	if err != nil {
		return nil, err
	}
	var fallback *atomic.Uint64
	switch {
	case !b.answers(c):
		fallback = &b.stats.unanswerable
	case !b.synced():
		fallback = &b.stats.unsynced
	case b.lag() > b.maxBreak:
		fallback = &b.stats.broken
	default:
		sa, pod, err := b.look(c)
		switch {
		case err != nil:
			return nil, err
		case sa == present && pod == present:
			b.stats.answered.Add(1)
			return c, nil
		}
		fallback = &b.stats.unknown
	}
	fallback.Add(1)
	rc, err := b.review.Authenticate(ctx, token)
	if err == nil && !authn.SameIdentity(c, rc) {
		return nil, authn.Fail(authn.TokenInvalid, "the offline identity %q differs from the one TokenReview returned", c.Username)
	}
	return rc, err
}

// answers says whether the view can answer for c: a service account's
// token bound to a pod the view watches.
func (b *Bound) answers(c *authn.Caller) bool {
	_, _, isSA := authn.ServiceAccountOf(c.Username)
	return isSA && c.UID != "" && c.PodName != "" && c.PodUID != "" && (b.nodeName == "" || c.NodeName == b.nodeName)
}

// look finds c's service account and pod in the view; when either is gone,
// the refusal.
func (b *Bound) look(c *authn.Caller) (sa, pod presence, err error) {
	ns, account, _ := authn.ServiceAccountOf(c.Username)
	now := b.now()
	sa, pod = b.accounts.find(ns, account, c.UID, now), b.pods.find(ns, c.PodName, c.PodUID, now)
	switch {
	case sa == gone:
		err = authn.Fail(authn.TokenInvalid, "the service account %s/%s it is bound to no longer exists", ns, account)
	case pod == gone:
		err = authn.Fail(authn.TokenInvalid, "the pod %s/%s it is bound to no longer exists", ns, c.PodName)
	}
	if err != nil {
		b.stats.gone.Add(1)
	}
	return sa, pod, err
}

// Revoked tells the verdict cache, on every hit, that a caller it holds
// is bound to a service account or pod the view has seen go: the token is
// refused within the watch's delay, not the cache's TTL. When the view
// cannot answer (unsynced, broken, not its pod), the cached verdict stands
// as it would under TokenReview.
func (b *Bound) Revoked(c *authn.Caller) error {
	if !b.answers(c) || !b.Healthy() {
		return nil
	}
	_, _, err := b.look(c)
	return err
}

// What the view knows of a bound object.
type presence int

const (
	// unknown: not in the view and not seen deleted — created after the
	// view's last event, or deleted before the view began.
	unknown presence = iota
	present
	gone
)

// deletedLeeway is the API server's: an object whose deletion timestamp is
// more than a minute past already invalidates its tokens; one being
// deleted gracefully (a timestamp in the future) does not yet.
const deletedLeeway = time.Minute

// find says whether the view holds namespace/name with that UID (judged as
// the API server's service-account authenticator judges it), has seen that
// UID deleted, or does not know.
func (w *watched) find(ns, name, uid string, now time.Time) presence {
	if w.deleted(uid) {
		return gone
	}
	obj, ok, err := w.inf.GetStore().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return unknown
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || string(m.UID) != uid {
		// Another object of that name: either the token's was deleted
		// before the view began, or the view has not yet seen the token's.
		return unknown
	}
	if m.DeletionTimestamp != nil && m.DeletionTimestamp.Time.Before(now.Add(-deletedLeeway)) {
		return gone
	}
	return present
}

// tombstones remember the UIDs the watch saw deleted (or replaced under
// their name), for Tombstones: a token of one of them is refused without a
// review. The oldest is forgotten first when MaxTombstones are held.
type tombstones struct {
	ttl   time.Duration
	limit int
	at    map[string]time.Time
	order []string // oldest first
}

func (w *watched) bury(uid string, now time.Time) {
	if uid == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := &w.dead
	if _, ok := t.at[uid]; ok {
		return
	}
	t.at[uid] = now
	t.order = append(t.order, uid)
	for len(t.order) > 0 && (len(t.order) > t.limit || now.Sub(t.at[t.order[0]]) > t.ttl) {
		delete(t.at, t.order[0])
		t.order[0] = ""
		t.order = t.order[1:]
	}
}

func (w *watched) deleted(uid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.dead.at[uid]
	return ok && w.now().Sub(at) <= w.dead.ttl
}

// slim keeps of an object's metadata what the view reads — name,
// namespace, UID, deletion timestamp — and the resource version the
// informer needs: labels, annotations, owner references and managed fields
// would cost memory per object for nothing.
func slim(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, DeletionTimestamp: m.DeletionTimestamp,
	}}, nil
}

// uidOf is the UID of an informer's object, or of the last state of one
// whose deletion was missed.
func uidOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return string(m.UID)
	}
	return ""
}

// OfflineVerifier is the verifier that checks signature, issuer, audience
// and expiry (for its key metrics).
func (b *Bound) OfflineVerifier() authn.Authenticator { return b.offline }

// MetadataClient is a metadata client (client-go/metadata) for the API
// server cfg names, for [BoundConfig.Metadata].
func MetadataClient(cfg Config) (metadata.Interface, error) {
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	return metadata.NewForConfig(rc)
}
