// Package fleetsim simulates a fleet of publishing pods in front of a
// replicated service and counts the TokenReviews its caller
// authentication sends the Kubernetes API server — with the real verdict
// cache (authn.Cache), the real recheck authenticator (authn.Recheck) and
// the real bound-object view (kube.Bound, its informers fed by client-go's
// fake metadata client holding the fleet's pods and service accounts),
// driven by a simulated clock, and the real token lifetimes: the kubelet
// rotates a projected token at 80 % of its lifetime. Only the API server
// is a stand-in: it counts the reviews it is asked for and accepts every
// live token. cmd/fleet-sim prints its table; docs/scale.md has one.
package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	metafake "k8s.io/client-go/metadata/fake"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
)

// Config is one simulated fleet and service.
type Config struct {
	Nodes, PodsPerNode int
	// PublishEvery is each pod's period; pods start at random phases.
	PublishEvery time.Duration
	// TokenLifetime is a projected token's lifetime; the kubelet replaces
	// it at RotateAt (0.8) of it. Pods are at random points of their
	// tokens' lives when the simulation starts.
	TokenLifetime time.Duration
	RotateAt      float64
	// Replicas of the service behind one Service: each request goes to one
	// at random, as kube-proxy spreads connections.
	Replicas int
	// CacheTTL and CacheMaxEntries are the verdict cache's (per replica).
	CacheTTL        time.Duration
	CacheMaxEntries int
	// ReviewInterval, when positive, puts authn.Recheck behind the cache:
	// offline verification, and a TokenReview per credential at first
	// sight and once per interval. Zero: a TokenReview per cache miss.
	ReviewInterval time.Duration
	// WatchBoundObjects puts kube.Bound behind the cache instead (with
	// ReviewInterval too, authn.Recheck over it): each replica's view
	// holds every pod and service account of the fleet.
	WatchBoundObjects bool
	// ServiceAccounts the pods run as (pod i as service account i mod
	// ServiceAccounts). Zero: one per pod.
	ServiceAccounts int
	// Warmup is simulated before counting; Measure is counted. Zero: a
	// warm-up long enough for every pod to have rotated its token and every
	// review to have lapsed once (the longer of the rotation period and
	// ReviewInterval, plus CacheTTL), and one rotation period measured: a
	// steady state, averaged over a whole cycle.
	Warmup, Measure time.Duration
	Seed            uint64
}

// Result is what one run measured, over the Measure window.
type Result struct {
	Warmup, Measure  time.Duration
	Pods             int
	Requests         int64
	Reviews          int64   // TokenReviews the API server received
	ReviewsPerSecond float64 // all replicas
	PerReplica       float64 // ReviewsPerSecond / Replicas
	HitRatio         float64 // verdict-cache hits / lookups
	CacheEntries     int     // per replica, at the end (mean)
	RecheckEntries   int     // per replica, at the end (mean), under ReviewInterval
	BytesPerReplica  int64   // cache (and recheck table, and view) memory per replica, estimated
	Evictions        uint64  // verdicts evicted from full caches, all replicas
	ViewObjects      int     // per replica, under WatchBoundObjects: pods and service accounts held
	Fallbacks        uint64  // tokens the views sent to TokenReview, all replicas, over Measure
}

func (c *Config) validate() error {
	switch {
	case c.Nodes <= 0 || c.PodsPerNode <= 0:
		return errors.New("fleetsim: nodes and pods per node must be positive")
	case c.PublishEvery < time.Second:
		return errors.New("fleetsim: publish period below a second")
	case c.TokenLifetime < 10*time.Minute:
		return errors.New("fleetsim: the API server issues tokens of 10 minutes at least")
	case c.RotateAt <= 0 || c.RotateAt >= 1:
		return errors.New("fleetsim: rotate-at is a fraction of the lifetime, between 0 and 1")
	case c.Replicas <= 0 || c.CacheTTL <= 0 || c.CacheMaxEntries <= 0:
		return errors.New("fleetsim: replicas, cache TTL and cache size must be positive")
	case c.Warmup < 0 || c.Measure < 0:
		return errors.New("fleetsim: negative warm-up or measure")
	case c.ServiceAccounts < 0:
		return errors.New("fleetsim: negative service accounts")
	}
	if c.ServiceAccounts == 0 {
		c.ServiceAccounts = c.Nodes * c.PodsPerNode
	}
	rotate := time.Duration(float64(c.TokenLifetime) * c.RotateAt)
	if c.Warmup == 0 {
		c.Warmup = max(rotate, c.ReviewInterval) + c.CacheTTL
	}
	if c.Measure == 0 {
		c.Measure = rotate
	}
	return nil
}

// pod is one publishing pod: its phase, and where its token's life began.
type pod struct {
	name   string
	offset time.Duration // token generation g starts at g*rotate - offset
	gen    int64
	token  string
}

// Run simulates the fleet and returns what the API server saw.
func Run(cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	// Measured once, before any run has put anything on the heap.
	sizesOnce.Do(func() { cacheBytes, recheckBytes, viewBytes = entryBytes() })
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)) //nolint:gosec // a reproducible simulation, not a secret
	start := time.Unix(1_800_000_000, 0)
	now := start
	clock := func() time.Time { return now }
	rotate := time.Duration(float64(cfg.TokenLifetime) * cfg.RotateAt)
	n := cfg.Nodes * cfg.PodsPerNode

	var reviews int64
	// The API server: every live token is valid; a token names its pod
	// and generation, from which its issue time follows.
	apiserver := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		reviews++
		return caller(tok, rotate, cfg.TokenLifetime, start, cfg.ServiceAccounts)
	})
	offline := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		return caller(tok, rotate, cfg.TokenLifetime, start, cfg.ServiceAccounts)
	})
	caches := make([]*authn.Cache, cfg.Replicas)
	rechecks := make([]*authn.Recheck, cfg.Replicas)
	views := make([]*kube.Bound, cfg.Replicas)
	stopViews := func() {}
	if cfg.WatchBoundObjects {
		ctx, cancel := context.WithCancel(context.Background())
		stopViews = cancel
		for i := range views {
			b, err := startView(ctx, n, cfg.ServiceAccounts, authn.Layer{Authenticator: offline}, authn.Layer{Authenticator: apiserver})
			if err != nil {
				cancel()
				return Result{}, err
			}
			views[i] = b
		}
	}
	defer stopViews()
	for i := range caches {
		first, inner := authn.Layer{Authenticator: offline}, authn.Layer{Authenticator: apiserver}
		if views[i] != nil {
			first, inner = views[i].Layer(), views[i].Layer()
		}
		if cfg.ReviewInterval > 0 {
			r, err := authn.NewRecheck(authn.RecheckConfig{Offline: first, Review: authn.Layer{Authenticator: apiserver}, Interval: cfg.ReviewInterval,
				MaxEntries: 10 * cfg.CacheMaxEntries, Now: clock})
			if err != nil {
				return Result{}, err
			}
			rechecks[i], inner = r, r.Layer()
		}
		caches[i] = authn.NewCache(inner, authn.CacheConfig{TTL: cfg.CacheTTL, NegativeTTL: -1, MaxEntries: cfg.CacheMaxEntries, MaxInFlight: 1, Now: clock})
	}

	// Pods grouped by the second of the period they publish in.
	period := int64(cfg.PublishEvery / time.Second)
	buckets := make([][]*pod, period)
	for i := range n {
		p := &pod{name: "p" + strconv.Itoa(i), offset: time.Duration(rng.Int64N(int64(rotate))), gen: -1}
		b := rng.Int64N(period)
		buckets[b] = append(buckets[b], p)
	}
	ctx := context.Background()
	total := cfg.Warmup + cfg.Measure
	var res Result
	var before []authn.CacheStats
	var fallbacksBefore uint64
	for s := int64(0); time.Duration(s)*time.Second < total; s++ {
		now = start.Add(time.Duration(s) * time.Second)
		if before == nil && time.Duration(s)*time.Second >= cfg.Warmup {
			reviews = 0
			for _, c := range caches {
				before = append(before, c.Stats())
			}
			fallbacksBefore = viewFallbacks(views)
		}
		for _, p := range buckets[s%period] {
			g := int64((now.Sub(start) + p.offset) / rotate)
			if g != p.gen {
				p.gen, p.token = g, p.name+"."+strconv.FormatInt(g, 10)+"."+strconv.FormatInt(int64(p.offset), 10)
			}
			if _, err := caches[rng.IntN(cfg.Replicas)].Authenticate(ctx, p.token); err != nil {
				return Result{}, fmt.Errorf("fleetsim: %s refused at %s: %w", p.token, now.Sub(start), err)
			}
			if before != nil {
				res.Requests++
			}
		}
	}
	var hits, lookups uint64
	for i, c := range caches {
		st := c.Stats()
		hits += st.Hits - before[i].Hits
		lookups += st.Hits - before[i].Hits + st.Misses - before[i].Misses
		res.Evictions += st.Evictions - before[i].Evictions
		res.CacheEntries += c.Len()
		if rechecks[i] != nil {
			res.RecheckEntries += rechecks[i].Remembered()
		}
		if views[i] != nil {
			st := views[i].Stats()
			res.ViewObjects += st.Pods + st.ServiceAccounts
		}
	}
	res.Fallbacks = viewFallbacks(views) - fallbacksBefore
	res.ViewObjects /= cfg.Replicas
	res.Pods, res.Warmup, res.Measure = n, cfg.Warmup, cfg.Measure
	res.Reviews = reviews
	res.ReviewsPerSecond = float64(reviews) / cfg.Measure.Seconds()
	res.PerReplica = res.ReviewsPerSecond / float64(cfg.Replicas)
	if lookups > 0 {
		res.HitRatio = float64(hits) / float64(lookups)
	}
	res.CacheEntries /= cfg.Replicas
	res.RecheckEntries /= cfg.Replicas
	res.BytesPerReplica = int64(res.CacheEntries)*cacheBytes + int64(res.RecheckEntries)*recheckBytes + int64(res.ViewObjects)*viewBytes
	return res, nil
}

// EntryBytes are what one cached verdict, one recheck record and one pod
// or service account of a bound-object view (kube.Bound's informer store,
// metadata slimmed to what it reads) cost, measured by filling each with
// 20,000.
func EntryBytes() (cache, recheck, view int64) {
	sizesOnce.Do(func() { cacheBytes, recheckBytes, viewBytes = entryBytes() })
	return cacheBytes, recheckBytes, viewBytes
}

var (
	sizesOnce                           sync.Once
	cacheBytes, recheckBytes, viewBytes int64
)

func viewFallbacks(views []*kube.Bound) uint64 {
	var n uint64
	for _, v := range views {
		if v != nil {
			n += v.Stats().Reviewed()
		}
	}
	return n
}

// startView runs a kube.Bound whose informers list and watch pods pods
// (p0…) and accounts service accounts (sa0…) in namespace fleet from
// client-go's fake metadata client, and waits until it has synced.
func startView(ctx context.Context, pods, accounts int, offline, review authn.Layer) (*kube.Bound, error) {
	objs := make([]runtime.Object, 0, pods+accounts)
	for i := range pods {
		objs = append(objs, meta("Pod", "p"+strconv.Itoa(i)))
	}
	for i := range accounts {
		objs = append(objs, meta("ServiceAccount", "sa"+strconv.Itoa(i)))
	}
	b, err := kube.NewBound(kube.BoundConfig{Metadata: endingWatches{metaClient(objs)}, Offline: offline, Review: review})
	if err != nil {
		return nil, err
	}
	go func() { _ = b.Start(ctx) }()
	for deadline := time.Now().Add(5 * time.Minute); !b.Healthy(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, errors.New("fleetsim: the bound-object view did not sync in 5 minutes")
		}
	}
	return b, nil
}

// endingWatches is a metadata client whose watches end at their
// timeoutSeconds, as the API server's do: client-go's fake never ends
// one, and the bound-object view counts a watch still open past its
// deadline as failed (replies swallowed somewhere).
type endingWatches struct{ metadata.Interface }

func (e endingWatches) Resource(r schema.GroupVersionResource) metadata.Getter {
	return endingResource{e.Interface.Resource(r)}
}

type endingResource struct{ metadata.Getter }

func (r endingResource) Namespace(ns string) metadata.ResourceInterface {
	return endingNamespace{r.Getter.Namespace(ns)}
}

type endingNamespace struct{ metadata.ResourceInterface }

func (n endingNamespace) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := n.ResourceInterface.Watch(ctx, opts)
	if err != nil || opts.TimeoutSeconds == nil {
		return w, err
	}
	return endAt(w, time.Duration(*opts.TimeoutSeconds)*time.Second), nil
}

// ending passes a watch's events on until its deadline, then ends it.
type ending struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func endAt(inner watch.Interface, after time.Duration) watch.Interface {
	e := &ending{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(e.out)
		defer inner.Stop()
		deadline := time.NewTimer(after)
		defer deadline.Stop()
		for {
			select {
			case ev, ok := <-inner.ResultChan():
				if !ok {
					return
				}
				select {
				case e.out <- ev:
				case <-e.stop:
					return
				case <-deadline.C:
					return
				}
			case <-e.stop:
				return
			case <-deadline.C:
				return
			}
		}
	}()
	return e
}

func (e *ending) ResultChan() <-chan watch.Event { return e.out }
func (e *ending) Stop()                          { e.once.Do(func() { close(e.stop) }) }

// metaClient is client-go's fake metadata client holding objs.
func metaClient(objs []runtime.Object) *metafake.FakeMetadataClient {
	scheme := metafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		panic(err)
	}
	return metafake.NewSimpleMetadataClient(scheme, objs...)
}

func meta(kind, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, UID: types.UID(uid(kind, name))}}
}

// uid is a simulated object's UID, the same in the view and in its tokens.
func uid(kind, name string) string { return kind + "-" + name }

// caller is the identity of a simulated token "pod.generation.offset": pod
// p<i> runs as service account sa<i mod accounts>.
func caller(tok string, rotate, lifetime time.Duration, start time.Time, accounts int) (*authn.Caller, error) {
	name, rest, ok1 := strings.Cut(tok, ".")
	gen, off, ok2 := strings.Cut(rest, ".")
	g, err1 := strconv.ParseInt(gen, 10, 64)
	o, err2 := strconv.ParseInt(off, 10, 64)
	i, err3 := strconv.Atoi(strings.TrimPrefix(name, "p"))
	if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil {
		return nil, authn.Fail(authn.TokenInvalid, "not a simulated token")
	}
	sa := "sa" + strconv.Itoa(i%max(accounts, 1))
	issued := start.Add(time.Duration(g)*rotate - time.Duration(o))
	return &authn.Caller{Username: "system:serviceaccount:fleet:" + sa, UID: uid("ServiceAccount", sa), PodName: name, PodUID: uid("Pod", name),
		Issuer: "https://kubernetes.default.svc", CredentialID: "JTI=" + tok, IssuedAt: issued, Expiry: issued.Add(lifetime)}, nil
}

// entryBytes measures what one cached verdict, one recheck record and one
// object of a bound-object view cost, by filling a cache, a recheck table
// and a view with 20,000 of each.
func entryBytes() (cache, recheck, view int64) {
	const n = 20000
	measure := func(fill func()) int64 {
		var a, b goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&a)
		fill()
		goruntime.GC()
		goruntime.ReadMemStats(&b)
		return int64(b.HeapAlloc-a.HeapAlloc) / n //nolint:gosec // a heap's growth fits an int64
	}
	start := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return start }
	mk := func(_ context.Context, tok string) (*authn.Caller, error) {
		return caller(tok, 48*time.Minute, time.Hour, start, n)
	}
	var keep []any
	cache = measure(func() {
		c := authn.NewCache(authn.Layer{Authenticator: authn.AuthenticatorFunc(mk)}, authn.CacheConfig{MaxEntries: n, Now: clock})
		for i := range n {
			_, _ = c.Authenticate(context.Background(), "p"+strconv.Itoa(i)+".0.0")
		}
		keep = append(keep, c)
	})
	recheck = measure(func() {
		r, _ := authn.NewRecheck(authn.RecheckConfig{Offline: authn.Layer{Authenticator: authn.AuthenticatorFunc(mk)}, Review: authn.Layer{Authenticator: authn.AuthenticatorFunc(mk)}, Interval: time.Hour, MaxEntries: n, Now: clock})
		for i := range n {
			_, _ = r.Authenticate(context.Background(), "p"+strconv.Itoa(i)+".0.0")
		}
		keep = append(keep, r)
	})
	// The fake client's own copies are made before the first reading; the
	// growth is the view's informer store (and what it keeps beside).
	objs := make([]runtime.Object, 0, n)
	for i := range n {
		objs = append(objs, meta("Pod", "p"+strconv.Itoa(i)))
	}
	client := metaClient(objs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view = measure(func() {
		b, err := kube.NewBound(kube.BoundConfig{Metadata: client, Offline: authn.Layer{Authenticator: authn.AuthenticatorFunc(mk)}, Review: authn.Layer{Authenticator: authn.AuthenticatorFunc(mk)}})
		if err != nil {
			panic(err)
		}
		go func() { _ = b.Start(ctx) }()
		for b.Stats().Pods < n {
			time.Sleep(10 * time.Millisecond)
		}
		keep = append(keep, b)
	})
	goruntime.KeepAlive(keep)
	goruntime.KeepAlive(client)
	return cache, recheck, view
}
