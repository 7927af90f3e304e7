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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
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
// This is the library half of the bound-object mode; a service flag to
// choose it is not wired yet. Known gap: client-go's reflector retries a
// watch whose connection is cut without calling the watch error handler, so
// MaxWatchBreak covers reported list and watch errors only; a liveness
// signal for a silently dead watch is still to come.
type Bound struct {
	offline, review authn.Authenticator
	nodeName        string
	maxBreak        time.Duration
	now             func() time.Time

	pods, accounts cache.SharedIndexInformer

	mu          sync.Mutex
	brokenSince time.Time // first watch error since the last good list or event; zero: healthy

	stats boundCounters
}

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
	// MaxWatchBreak is how long a failing watch is tolerated before every
	// token is reviewed instead. Default 30 s.
	MaxWatchBreak time.Duration
	// Resync is the informers' resync period. Default 10 minutes.
	Resync time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// BoundStats count what [Bound] did.
type BoundStats struct {
	// Answered are tokens answered from the view (accepted or refused).
	Answered uint64
	// Gone are tokens refused because what they are bound to is gone.
	Gone uint64
	// Reviewed are tokens sent to TokenReview: the view had not synced,
	// its watch was broken, or it cannot answer for that token.
	Reviewed uint64
}

type boundCounters struct{ answered, gone, reviewed atomic.Uint64 }

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
		cfg.MaxWatchBreak = 30 * time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := &Bound{offline: cfg.Offline, review: cfg.Review, nodeName: cfg.NodeName, maxBreak: cfg.MaxWatchBreak, now: cfg.Now}
	podOptions := func(*metav1.ListOptions) {}
	if cfg.NodeName != "" {
		podOptions = func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}
	}
	b.pods = metadatainformer.NewFilteredMetadataInformer(cfg.Metadata, podsResource, metav1.NamespaceAll, cfg.Resync, cache.Indexers{}, podOptions).Informer()
	b.accounts = metadatainformer.NewFilteredMetadataInformer(cfg.Metadata, accountsResource, metav1.NamespaceAll, cfg.Resync, cache.Indexers{}, nil).Informer()
	for _, inf := range []cache.SharedIndexInformer{b.pods, b.accounts} {
		if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, _ error) { b.broken() }); err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { b.healed() }, UpdateFunc: func(any, any) { b.healed() }, DeleteFunc: func(any) { b.healed() },
		}); err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
	}
	return b, nil
}

// Start runs the watches until ctx ends.
func (b *Bound) Start(ctx context.Context) error {
	go b.pods.RunWithContext(ctx)
	go b.accounts.RunWithContext(ctx)
	<-ctx.Done()
	return nil
}

func (b *Bound) broken() {
	b.mu.Lock()
	if b.brokenSince.IsZero() {
		b.brokenSince = b.now()
	}
	b.mu.Unlock()
}

func (b *Bound) healed() {
	b.mu.Lock()
	b.brokenSince = time.Time{}
	b.mu.Unlock()
}

// Healthy reports whether the view answers: both watches synced, and
// neither failing for longer than MaxWatchBreak.
func (b *Bound) Healthy() bool {
	if !b.pods.HasSynced() || !b.accounts.HasSynced() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.brokenSince.IsZero() || b.now().Sub(b.brokenSince) < b.maxBreak
}

// Stats returns the counts so far.
func (b *Bound) Stats() BoundStats {
	return BoundStats{Answered: b.stats.answered.Load(), Gone: b.stats.gone.Load(), Reviewed: b.stats.reviewed.Load()}
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
	ns, account, isSA := authn.ServiceAccountOf(c.Username)
	answerable := isSA && c.UID != "" && c.PodName != "" && c.PodUID != "" && (b.nodeName == "" || c.NodeName == b.nodeName)
	if !answerable || !b.Healthy() {
		b.stats.reviewed.Add(1)
		rc, err := b.review.Authenticate(ctx, token)
		if err == nil && !authn.SameIdentity(c, rc) {
			return nil, authn.Fail(authn.TokenInvalid, "the offline identity %q differs from the one TokenReview returned", c.Username)
		}
		return rc, err
	}
	b.stats.answered.Add(1)
	if !b.exists(b.accounts, ns, account, c.UID) {
		b.stats.gone.Add(1)
		return nil, authn.Fail(authn.TokenInvalid, "the service account %s/%s it is bound to no longer exists (or is another with the same name)", ns, account)
	}
	if !b.exists(b.pods, ns, c.PodName, c.PodUID) {
		b.stats.gone.Add(1)
		return nil, authn.Fail(authn.TokenInvalid, "the pod %s/%s it is bound to no longer exists (or is another with the same name)", ns, c.PodName)
	}
	return c, nil
}

// deletedLeeway is the API server's: an object whose deletion timestamp is
// more than a minute past still invalidates its tokens; one being deleted
// gracefully (a timestamp in the future) does not yet.
const deletedLeeway = time.Minute

// exists reports whether the view holds namespace/name with that UID, not
// deleted, as the API server's service-account authenticator judges it.
func (b *Bound) exists(inf cache.SharedIndexInformer, ns, name, uid string) bool {
	obj, ok, err := inf.GetStore().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return false
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || string(m.UID) != uid {
		return false
	}
	return m.DeletionTimestamp == nil || !m.DeletionTimestamp.Time.Before(b.now().Add(-deletedLeeway))
}
