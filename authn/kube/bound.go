package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

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
// How the view proves that it is current, and the bound that proof keeps,
// is the package documentation's "The bound-object view". The view's parts
// are files of their own: boundwatch.go (the watches and how one fails),
// boundstore.go (the store they fill, tombstones), boundproof.go (the
// proofs of currency and what the view vouches for).
type Bound struct {
	offline, review authn.Layer
	nodeName        string
	maxBreak        time.Duration
	now             func() time.Time
	made            time.Time

	pods, accounts *watched

	stats boundCounters
}

// BoundConfig configures [NewBound].
type BoundConfig struct {
	// Metadata is the client the watches use (metadata.NewForConfigOrDie
	// of the REST config TokenReview uses). Required.
	Metadata metadata.Interface
	// Offline verifies signature, issuer, audience and expiry (kube.Offline).
	// Review is the fallback (the TokenReview authenticator's Layer, whose
	// Audiences the verdict cache keys Bound's verdicts by). Both
	// required.
	Offline, Review authn.Layer
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
	case cfg.Offline.Authenticator == nil || cfg.Review.Authenticator == nil:
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

// Ready is Healthy: the view has listed and proven itself current, so
// tokens are answered from it rather than reviewed.
func (b *Bound) Ready() bool { return b.Healthy() }

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

// Layer is the view as a layer (authn.Layer): the reviewer's audiences,
// the view's revocation on every verdict-cache hit ([Bound.Revoked]), and
// a fact either the offline verifier or TokenReview never states.
func (b *Bound) Layer() authn.Layer {
	return authn.Layer{Authenticator: b, Audiences: b.review.Audiences, Revoked: b.Revoked, Lacks: authn.LacksEither(b.review, b.offline)}
}

// Authenticate verifies the token offline, then checks its bound objects
// in the view — or reviews it when the view cannot answer.
func (b *Bound) Authenticate(ctx context.Context, token string) (*authn.Caller, error) {
	c, err := b.offline.Authenticator.Authenticate(ctx, token)
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
	rc, err := b.review.Authenticator.Authenticate(ctx, token)
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

// MetadataClient is a metadata client (client-go/metadata) for the API
// server cfg names, for [BoundConfig.Metadata].
func MetadataClient(cfg Config) (metadata.Interface, error) {
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	return metadata.NewForConfig(rc)
}
