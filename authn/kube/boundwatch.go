package kube

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

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

// watchGrace is how long past its timeout a watch may stay open before the
// view ends it as failed; deadlineSlack how much shorter than its timeout
// a watch the server ended at its deadline may measure here (an API server
// shutting down ends watches cleanly too, at any moment: one that ends
// earlier has failed).
const (
	watchGrace    = 2 * time.Second
	deadlineSlack = 500 * time.Millisecond
)

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
