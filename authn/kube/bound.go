package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
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
// the view cannot vouch for what it holds is reviewed instead: correctness
// never rests on a stale view.
//
// The view vouches only for what has reached its store, and proves it
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
type Bound struct {
	offline, review authn.Authenticator
	nodeName        string
	maxBreak        time.Duration
	now             func() time.Time
	made            time.Time

	pods, accounts *watched

	stats boundCounters
}

// watched is one resource's reflector, the store it fills and what is
// known of how current that store is.
type watched struct {
	resource string
	refl     *cache.Reflector
	store    cache.Store   // slimmed objects, keyed namespace/name
	timeout  time.Duration // each watch's server-side timeout, and the time between proofs
	now      func() time.Time
	held     atomic.Int64 // objects in the store (no list per scrape)
	failures atomic.Uint64
	// prove asks the API server how far the cluster has got: the resource
	// version of a consistent list of one object.
	prove func(ctx context.Context) (uint64, error)

	mu sync.Mutex
	// synced: a list has been applied to the store.
	synced bool
	// vouched: every change made before it is in the store.
	vouched time.Time
	// failed: when a watch or a proof failed after vouched (zero: none
	// has); the view does not answer until vouched passes it.
	failed time.Time
	// applied: the highest resource version the store has applied (an
	// event, a list or a bookmark); pending: the proofs asked whose
	// resource version it has not reached yet, oldest first.
	applied uint64
	pending []proof
	dead    tombstones
}

// DefaultMaxWatchBreak is the longest the view answers after it was last
// proven current.
const DefaultMaxWatchBreak = 10 * time.Second

// MinMaxWatchBreak is the least MaxWatchBreak: a watch's timeout is at
// least 3 s (its bookmark comes 2 s before it), and a proof asked every
// 3 s may wait a watch's timeout for that bookmark, all within the bound.
const MinMaxWatchBreak = 8 * time.Second

// proof is a consistent list's answer: the cluster had reached resource
// version rv when it was asked at at.
type proof struct {
	at time.Time
	rv uint64
}

// maxPending bounds the proofs waiting for the store; the oldest is
// dropped first (a later one proves more).
const maxPending = 8

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
	// MaxWatchBreak is the longest the view answers after it was last
	// proven current; it also bounds how long a verdict the cache holds
	// stands while the view cannot vouch. Proofs are asked, and each watch
	// is opened with a server-side timeout, every WatchTimeout(MaxWatchBreak)
	// (a bound less two seconds, halved; at least 3 s), so that a proof
	// completes within the bound. Default DefaultMaxWatchBreak; at least
	// MinMaxWatchBreak.
	MaxWatchBreak time.Duration
	// Tombstones is how long the UID of an object the watch saw deleted is
	// remembered, so that its tokens are refused without a review; after
	// it, such a token is reviewed (and refused by the API server). At most
	// MaxTombstones per resource are kept, the oldest forgotten first.
	// Defaults 1 h and 65,536.
	Tombstones    time.Duration
	MaxTombstones int
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
	// TokenReview because the view had not listed yet, because it could
	// not vouch for its state (a watch failed since its last proof, or
	// its last proof is older than MaxWatchBreak), because the view
	// cannot answer for that token (bound to no pod, or to a pod of
	// another node), or because the view does not know the object the
	// token names (created after the view's last event, or deleted before
	// the view began).
	Unsynced, Broken, Unanswerable, Unknown uint64
	// WatchFailures are the watches that failed to open or ended other
	// than at their deadline after their bookmark.
	WatchFailures uint64
	// Pods and ServiceAccounts are the objects the view holds.
	Pods, ServiceAccounts int
	// Synced: both resources have been listed.
	Synced bool
	// Answering: the view answers now (synced, proven current within
	// MaxWatchBreak, no watch failed since).
	Answering bool
	// Lag is how far behind the view may be: the time since the older of
	// the two resources was last proven current (since the view was made,
	// before that).
	Lag time.Duration
}

// Reviewed are all the tokens sent to TokenReview.
func (s BoundStats) Reviewed() uint64 { return s.Unsynced + s.Broken + s.Unanswerable + s.Unknown }

type boundCounters struct{ answered, gone, unsynced, broken, unanswerable, unknown atomic.Uint64 }

var (
	podsResource     = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	accountsResource = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
)

// NewBound builds the view's reflectors; [Bound.Start] runs them.
func NewBound(cfg BoundConfig) (*Bound, error) {
	switch {
	case cfg.Metadata == nil:
		return nil, errors.New("kube: the bound-object view needs a metadata client")
	case cfg.Offline == nil || cfg.Review == nil:
		return nil, errors.New("kube: the bound-object view needs an offline verifier and a reviewer")
	case cfg.MaxWatchBreak != 0 && cfg.MaxWatchBreak < MinMaxWatchBreak:
		return nil, fmt.Errorf("kube: a watch break bound of %s cannot be kept: a proof through the API server takes up to 6 s; want %s or more", cfg.MaxWatchBreak, MinMaxWatchBreak)
	}
	if cfg.MaxWatchBreak <= 0 {
		cfg.MaxWatchBreak = DefaultMaxWatchBreak
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
	b := &Bound{offline: cfg.Offline, review: cfg.Review, nodeName: cfg.NodeName, maxBreak: cfg.MaxWatchBreak, now: cfg.Now, made: cfg.Now()}
	var podSelector string
	if cfg.NodeName != "" {
		podSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}
	b.pods = b.watch(cfg, podsResource, podSelector)
	b.accounts = b.watch(cfg, accountsResource, "")
	return b, nil
}

// WatchTimeout is the server-side timeout of each watch under maxBreak,
// and the time between two proofs: the bound less 2 s, halved, in whole
// seconds, at least 3 s. A proof asked at T completes by the next
// bookmark, at most a watch's timeout later: the view is proven current
// at least every two of them, within the bound.
func WatchTimeout(maxBreak time.Duration) time.Duration {
	return max(3*time.Second, ((maxBreak - 2*time.Second) / 2).Truncate(time.Second))
}

// watch makes a reflector of resource into a store of its own: every
// event, list and bookmark is applied to the store in the reflector's
// goroutine, in the order the watch delivered them, so that a bookmark
// seen by the store is one whose earlier events are all in it.
func (b *Bound) watch(cfg BoundConfig, gvr schema.GroupVersionResource, fieldSelector string) *watched {
	w := &watched{resource: gvr.Resource, now: b.now, timeout: WatchTimeout(cfg.MaxWatchBreak),
		store: cache.NewStore(cache.MetaNamespaceKeyFunc),
		dead:  tombstones{ttl: cfg.Tombstones, limit: cfg.MaxTombstones, at: map[string]time.Time{}}}
	res := cfg.Metadata.Resource(gvr).Namespace(metav1.NamespaceAll)
	seconds := int64(w.timeout / time.Second)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fieldSelector
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fieldSelector
			o.TimeoutSeconds = &seconds
			o.AllowWatchBookmarks = true
			// The server ends the watch at its timeout; a watch still
			// open a little after (replies swallowed somewhere) is ended
			// here, so that a silent partition is a failed watch too.
			wctx, cancel := context.WithTimeout(ctx, w.timeout+watchGrace)
			iw, err := res.Watch(wctx, o)
			if err != nil {
				cancel()
				w.fail(w.now())
				return nil, err
			}
			return w.observe(wctx, iw, w.now(), cancel), nil
		},
	}
	// A paginated list, then watches (not a watch-list stream, which
	// would have to finish within the watch's short timeout); the store,
	// not a queue, receives every change (no informer, no resync).
	// Retries back off to the watch's timeout at most, so that the view is
	// back within seconds of the API server.
	backoff := &wait.Backoff{Duration: 800 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: w.timeout, Steps: 8}
	w.refl = cache.NewReflectorWithOptions(listThenWatch{lw}, &metav1.PartialObjectMetadata{}, (*viewStore)(w),
		cache.ReflectorOptions{Name: "bound-object view " + gvr.Resource, TypeDescription: gvr.Resource, Backoff: backoff})
	w.prove = func(ctx context.Context) (uint64, error) {
		// resourceVersion "": a consistent read, which the API server
		// serves only once its watch cache has caught up with etcd.
		l, err := res.List(ctx, metav1.ListOptions{FieldSelector: fieldSelector, Limit: 1})
		if err != nil {
			return 0, err
		}
		return parseRV(l.ResourceVersion)
	}
	return w
}

// listThenWatch is a ListWatch the reflector lists and then watches, never
// asks for a watch-list stream.
type listThenWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells client-go's reflector so.
func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// parseRV reads a resource version. Resource versions are opaque to
// clients, but the API server's are etcd revisions, compared as numbers by
// its own watch cache; one that is not cannot be compared, and the view
// does not vouch for a store it cannot compare.
func parseRV(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("kube: resource version %q is not a number; the bound-object view cannot tell how current it is", rv)
	}
	return n, nil
}

// proving asks for a proof every timeout until ctx ends; after a failed
// one, again sooner (from a quarter of a second, doubling up to the
// timeout), so that a view stopped by a short failure — an API server not
// ready yet at start-up — answers again within a second or so.
func (w *watched) proving(ctx context.Context) {
	retry := time.Duration(0)
	for {
		at := w.now()
		pctx, cancel := context.WithTimeout(ctx, w.timeout)
		rv, err := w.prove(pctx)
		cancel()
		next := w.timeout - w.now().Sub(at)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.fail(w.now())
			retry = min(max(2*retry, proofRetry), w.timeout)
			next = retry
		default:
			retry = 0
			w.proved(proof{at: at, rv: rv})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(next, 0)):
		}
	}
}

// proofRetry is the first wait after a failed proof.
const proofRetry = 250 * time.Millisecond

// proved records a proof; it vouches for the store as soon as the store
// has applied its resource version.
func (w *watched) proved(p proof) {
	w.mu.Lock()
	if w.applied < p.rv {
		if len(w.pending) == maxPending {
			w.pending = append(w.pending[:0], w.pending[1:]...)
		}
		w.pending = append(w.pending, p)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.vouch(p.at)
}

// reached records that the store has applied resource version rv, and
// vouches for it as of the latest proof that rv completes.
func (w *watched) reached(rv string) {
	n, err := parseRV(rv)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.applied = max(w.applied, n)
	var at time.Time
	i := 0
	for ; i < len(w.pending) && w.pending[i].rv <= w.applied; i++ {
		at = w.pending[i].at
	}
	w.pending = append(w.pending[:0], w.pending[i:]...)
	w.mu.Unlock()
	if !at.IsZero() {
		w.vouch(at)
	}
}

// watchGrace is how long past its timeout a watch may stay open before the
// view ends it as failed; deadlineSlack how much shorter than its timeout
// a watch the server ended at its deadline may measure here (an API server
// shutting down ends watches cleanly too, at any moment: one that ends
// earlier has failed).
const (
	watchGrace    = 2 * time.Second
	deadlineSlack = 500 * time.Millisecond
)

// vouch records that the store holds every change made before t.
func (w *watched) vouch(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.After(w.vouched) {
		w.vouched = t
	}
	if !w.failed.IsZero() && w.vouched.After(w.failed) {
		w.failed = time.Time{}
	}
}

// fail records that a watch or a proof failed at t: the view does not
// answer until a proof asked after t completes.
func (w *watched) fail(t time.Time) {
	w.failures.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed.IsZero() {
		w.failed = t
	}
}

// state is what the view can vouch for at now: whether it has listed,
// since when it cannot vouch (zero: it can), and since when its store is
// known complete.
func (w *watched) state(now time.Time, maxBreak time.Duration) (synced bool, brokenSince, vouched time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.synced {
		return false, time.Time{}, w.vouched
	}
	stale := w.vouched.Add(maxBreak)
	switch {
	case !w.failed.IsZero() && w.failed.Before(stale):
		return true, w.failed, w.vouched
	case !now.Before(stale):
		return true, stale, w.vouched
	}
	return true, time.Time{}, w.vouched
}

// observed passes a watch's events on and, when the watch ends, records a
// failure unless the server ended it at its deadline — the way the API
// server ends a healthy watch (one still open at its deadline plus
// watchGrace, ended here, has failed; so has one that ends early, as
// client-go's empty watch does at once).
type observed struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func (w *watched) observe(wctx context.Context, inner watch.Interface, opened time.Time, cancel context.CancelFunc) watch.Interface {
	o := &observed{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer cancel()
		defer close(o.out)
		stopped := false
		defer func() {
			// Stopped by the reflector (the process stopping, or an
			// event it would not take): not the network's doing, but
			// the store is not proven current past this watch either.
			ended := w.now()
			// The server's timer starts before the answer reaches here:
			// a deadline end measures a little under the timeout.
			if stopped || ended.Sub(opened) < w.timeout-deadlineSlack || wctx.Err() != nil {
				w.fail(ended)
			}
		}()
		for {
			select {
			case ev, ok := <-inner.ResultChan():
				if !ok {
					return
				}
				select {
				case o.out <- ev:
				case <-o.stop:
					stopped = true
					return
				}
			case <-o.stop:
				stopped = true
				return
			case <-wctx.Done():
				// Past the deadline and its grace: ended here, whatever
				// the client's stream does with its context.
				inner.Stop()
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

// viewStore is the store the reflector fills: it keeps the slimmed
// objects, remembers the UIDs it sees go, and learns from lists and
// bookmarks how current it is.
type viewStore watched

var (
	_ cache.ReflectorStore         = (*viewStore)(nil)
	_ cache.ReflectorBookmarkStore = (*viewStore)(nil)
)

func (s *viewStore) Add(obj any) error    { return s.put(obj) }
func (s *viewStore) Update(obj any) error { return s.put(obj) }

// object is the slimmed metadata of obj and its key in the store.
func (w *watched) object(obj any) (*metav1.PartialObjectMetadata, string, error) {
	m := slim(obj)
	if m == nil {
		return nil, "", fmt.Errorf("kube: %s: unexpected object %T", w.resource, obj)
	}
	return m, m.Namespace + "/" + m.Name, nil
}

func (s *viewStore) put(obj any) error {
	w := (*watched)(s)
	m, key, err := w.object(obj)
	if err != nil {
		return err
	}
	if old, ok, _ := w.store.GetByKey(key); ok {
		if u := uidOf(old); u != string(m.UID) {
			w.bury(u, w.now())
		}
	} else {
		w.held.Add(1)
	}
	if err := w.store.Add(m); err != nil {
		return err
	}
	w.reached(m.ResourceVersion)
	return nil
}

func (s *viewStore) Delete(obj any) error {
	w := (*watched)(s)
	m, key, err := w.object(obj)
	if err != nil {
		return err
	}
	if old, ok, _ := w.store.GetByKey(key); ok {
		w.held.Add(-1)
		w.bury(uidOf(old), w.now())
		if err := w.store.Delete(old); err != nil {
			return err
		}
	}
	w.bury(string(m.UID), w.now())
	w.reached(m.ResourceVersion)
	return nil
}

// Replace applies a list: what the store held and the list lacks (or holds
// under another UID) was deleted meanwhile.
func (s *viewStore) Replace(list []any, rv string) error {
	w := (*watched)(s)
	items := make([]any, 0, len(list))
	uids := make(map[string]string, len(list))
	for _, obj := range list {
		m := slim(obj)
		if m == nil {
			return fmt.Errorf("kube: %s: unexpected object %T", w.resource, obj)
		}
		items = append(items, m)
		uids[m.Namespace+"/"+m.Name] = string(m.UID)
	}
	now := w.now()
	for _, old := range w.store.List() {
		m := old.(*metav1.PartialObjectMetadata)
		if uids[m.Namespace+"/"+m.Name] != string(m.UID) {
			w.bury(string(m.UID), now)
		}
	}
	if err := w.store.Replace(items, rv); err != nil {
		return err
	}
	w.held.Store(int64(len(items)))
	w.mu.Lock()
	w.synced = true
	w.mu.Unlock()
	w.reached(rv)
	return nil
}

// Bookmark: every change the watch sends up to rv is in the store.
func (s *viewStore) Bookmark(rv string) error {
	(*watched)(s).reached(rv)
	return nil
}

func (s *viewStore) Resync() error { return nil }

// Start runs the watches and their proofs until ctx ends.
func (b *Bound) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, w := range []*watched{b.pods, b.accounts} {
		wg.Go(func() { w.refl.RunWithContext(ctx) })
		wg.Go(func() { w.proving(ctx) })
	}
	wg.Wait()
	return nil
}

// view is what the two resources together can vouch for at now.
type view struct {
	synced bool
	// brokenSince: since when the view cannot vouch (zero: it can).
	brokenSince time.Time
	// vouched: the store holds every change made before it.
	vouched time.Time
}

func (b *Bound) view(now time.Time) view {
	ps, pb, pv := b.pods.state(now, b.maxBreak)
	as, ab, av := b.accounts.state(now, b.maxBreak)
	v := view{synced: ps && as, vouched: pv, brokenSince: pb}
	if av.Before(v.vouched) {
		v.vouched = av
	}
	if !ab.IsZero() && (v.brokenSince.IsZero() || ab.Before(v.brokenSince)) {
		v.brokenSince = ab
	}
	return v
}

func (v view) answers() bool { return v.synced && v.brokenSince.IsZero() }

// Healthy reports whether the view answers: both resources listed, proven
// current within MaxWatchBreak, and no watch failed since.
func (b *Bound) Healthy() bool { return b.view(b.now()).answers() }

// Stats returns the counts so far and the view's state.
func (b *Bound) Stats() BoundStats {
	now := b.now()
	v := b.view(now)
	lag := max(now.Sub(cmp.Or(v.vouched, b.made)), 0)
	return BoundStats{
		Answered: b.stats.answered.Load(), Gone: b.stats.gone.Load(),
		Unsynced: b.stats.unsynced.Load(), Broken: b.stats.broken.Load(), Unanswerable: b.stats.unanswerable.Load(), Unknown: b.stats.unknown.Load(),
		WatchFailures: b.pods.failures.Load() + b.accounts.failures.Load(),
		Pods:          int(b.pods.held.Load()), ServiceAccounts: int(b.accounts.held.Load()),
		Synced: v.synced, Answering: v.answers(), Lag: lag,
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
	v := b.view(b.now())
	switch {
	case !b.answers(c):
		fallback = &b.stats.unanswerable
	case !v.synced:
		fallback = &b.stats.unsynced
	case !v.answers():
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

// Revoked tells the verdict cache, on every hit, whether a verdict it
// holds for c, reached by a verification that began at verified, still
// stands:
//   - while the view answers: refused when c's service account or pod is
//     gone; asked again when the view, current since after that
//     verification, does not know them (deleted before the view listed,
//     or replaced); else it stands;
//   - while the view cannot vouch (unsynced, a watch failed, no proof
//     within MaxWatchBreak): a verdict reached after the view stopped
//     vouching (a TokenReview's) stands for MaxWatchBreak; any other —
//     the view's own, or older — is asked again, and so reviewed.
//
// So a token of an object deleted at t is accepted from the cache no
// later than t + MaxWatchBreak either. Callers the view cannot answer for
// keep their verdicts as under TokenReview.
func (b *Bound) Revoked(c *authn.Caller, verified time.Time) error {
	if !b.answers(c) {
		return nil
	}
	now := b.now()
	v := b.view(now)
	if !v.answers() {
		if verified.Before(v.brokenSince) || now.Sub(verified) > b.maxBreak {
			return authn.ErrReverify
		}
		return nil
	}
	sa, pod, err := b.look(c)
	switch {
	case err != nil:
		return err
	case (sa == unknown || pod == unknown) && verified.Before(v.vouched):
		return authn.ErrReverify
	}
	return nil
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
	obj, ok, err := w.store.GetByKey(ns + "/" + name)
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
// namespace, UID, deletion timestamp — and the resource version:
// labels, annotations, owner references and managed fields would cost
// memory per object for nothing. Nil for anything but object metadata.
func slim(obj any) *metav1.PartialObjectMetadata {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, DeletionTimestamp: m.DeletionTimestamp,
	}}
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

// Lacks is what the TokenReview it falls back on never states
// (authn.Stating).
func (b *Bound) Lacks(f authn.Fact) string {
	if why := authn.Lacks(b.review, f); why != "" {
		return why
	}
	return authn.Lacks(b.offline, f)
}
