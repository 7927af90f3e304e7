package kube_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/reason"
)

// boundEnv is a Bound against the dev issuer's metadata API (list and
// watch of pods and service accounts), its watches through a TCP proxy the
// test can cut.
type boundEnv struct {
	*env
	b     *kube.Bound
	proxy *faults.Proxy
}

func startBound(t *testing.T, cfg kube.BoundConfig) *boundEnv {
	t.Helper()
	be := newBound(t, cfg)
	be.run(t)
	waitUntil(t, "the view synced", be.b.Healthy)
	return be
}

// newBound makes the view without starting it.
func newBound(t *testing.T, cfg kube.BoundConfig) *boundEnv {
	t.Helper()
	e := start(t, nil)
	kcfg := kube.Config{REST: e.rest, Audiences: []string{aud}, Issuers: []string{devissuer.DefaultIssuer}}
	offline, err := kube.Offline(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	watchREST := rest.CopyConfig(e.rest)
	watchREST.Host = "https://" + proxy.Addr()
	cfg.Metadata, cfg.Offline, cfg.Review = metadata.NewForConfigOrDie(watchREST), offline.Layer(), e.authenticator(t, kcfg).Layer()
	b, err := kube.NewBound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &boundEnv{env: e, b: b, proxy: proxy}
}

// run starts the view's watches until the test ends.
func (be *boundEnv) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = be.b.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitUntil(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for: %s", what)
		}
	}
}

// verdict is the token's reason ("" accepted) and the TokenReviews it cost.
func (be *boundEnv) verdict(t *testing.T, tok string) (reason.Reason, string, int) {
	t.Helper()
	before := be.faults.Count(reviews)
	_, err := be.b.Authenticate(context.Background(), tok)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return authn.ReasonOf(err), msg, be.faults.Count(reviews) - before
}

func TestBoundAnswersFromTheWatch(t *testing.T) {
	be := startBound(t, kube.BoundConfig{NodeName: "node-a"})
	tok := be.mint(t, devissuer.TokenRequest{Pod: "mon-1", Node: "node-a"}).Token
	// The view learns of the new pod from the watch; until it does, the
	// token is reviewed (unknown), never refused.
	waitUntil(t, "the view knows the pod", func() bool {
		r, msg, _ := be.verdict(t, tok)
		if !r.IsZero() && r != authn.TokenInvalid {
			t.Fatalf("before the view knew the pod: %s", msg)
		}
		return be.b.Stats().Answered > 0
	})
	for range 20 {
		if r, msg, n := be.verdict(t, tok); !r.IsZero() || n != 0 {
			t.Fatalf("a pod-bound token on the watched node: %s, %d TokenReviews", msg, n)
		}
	}

	// A pod of another node is outside the view: reviewed.
	other := be.mint(t, devissuer.TokenRequest{Pod: "mon-2", Node: "node-b"}).Token
	if r, msg, n := be.verdict(t, other); !r.IsZero() || n != 1 {
		t.Fatalf("a pod of another node: %s, %d TokenReviews; want accepted after one", msg, n)
	}
	// So is a token bound to no pod.
	unbound := be.mint(t, devissuer.TokenRequest{}).Token
	if r, msg, n := be.verdict(t, unbound); !r.IsZero() || n != 1 {
		t.Fatalf("a token bound to no pod: %s, %d TokenReviews; want accepted after one", msg, n)
	}

	// The pod is deleted: refused as soon as the watch says so, no review.
	if err := be.iss.DeletePod("nvsentinel", "mon-1"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	waitUntil(t, "the deleted pod's token refused", func() bool {
		r, _, _ := be.verdict(t, tok)
		return r == authn.TokenInvalid
	})
	took := time.Since(deleted)
	r, msg, n := be.verdict(t, tok)
	if r != authn.TokenInvalid || !strings.Contains(msg, "the pod nvsentinel/mon-1 it is bound to no longer exists") || n != 0 {
		t.Fatalf("the deleted pod's token: %s, %d TokenReviews", msg, n)
	}
	// A new pod of the same name has another UID: the old token stays refused.
	fresh := be.mint(t, devissuer.TokenRequest{Pod: "mon-1", Node: "node-a"}).Token
	waitUntil(t, "the new pod in the view", func() bool { return be.b.Stats().Pods == 1 })
	if r, msg, n := be.verdict(t, fresh); !r.IsZero() || n != 0 {
		t.Fatalf("the new pod's token: %s, %d TokenReviews", msg, n)
	}
	if r, msg, n := be.verdict(t, tok); r != authn.TokenInvalid || n != 0 {
		t.Fatalf("the old token beside a new pod of the same name: %s, %d TokenReviews", msg, n)
	}
	s := be.b.Stats()
	t.Logf("refused %s after the deletion; stats %+v", took.Round(time.Millisecond), s)
	if s.Unanswerable != 2 || s.Gone < 2 || s.Pods != 1 || s.ServiceAccounts != 1 || !s.Synced {
		t.Fatalf("stats %+v", s)
	}
}

// TestBoundRefusesABoundTooShortToKeep: a proof through the API server
// takes up to two watch timeouts of at least 3 s, so a bound under 8 s is
// refused when the view is built, naming the least.
func TestBoundRefusesABoundTooShortToKeep(t *testing.T) {
	none := authn.Layer{Authenticator: authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) { return nil, nil })}
	_, err := kube.NewBound(kube.BoundConfig{Metadata: metadata.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:1"}), Offline: none, Review: none, MaxWatchBreak: time.Second})
	if err == nil || !strings.Contains(err.Error(), "1s") || !strings.Contains(err.Error(), "8s or more") {
		t.Fatalf("NewBound with a 1 s bound: %v", err)
	}
	for _, tc := range []struct{ bound, want time.Duration }{{8 * time.Second, 3 * time.Second}, {10 * time.Second, 4 * time.Second}, {11 * time.Second, 4 * time.Second}, {time.Minute, 29 * time.Second}} {
		if got := kube.WatchTimeout(tc.bound); got != tc.want {
			t.Errorf("WatchTimeout(%s) = %s; want %s", tc.bound, got, tc.want)
		}
	}
}

// partitions are the ways a network fails the view's watches, through
// the proxy in front of the metadata API: every connection closed and
// each new one closed as it is accepted (client-go retries such a watch
// itself, then hands back an empty one), the port closed (dials refused),
// and replies swallowed (nothing says anything is wrong).
var partitions = []struct {
	name       string
	cut        func(*faults.Proxy)
	mend       func(*faults.Proxy) error
	observable bool // the view learns of it from a failed watch, not only from time
}{
	{"closed", (*faults.Proxy).Cut, (*faults.Proxy).Mend, true},
	{"refused", (*faults.Proxy).Refuse, (*faults.Proxy).Mend, true},
	{"blackhole", func(p *faults.Proxy) { p.HoldReplies(true) }, func(p *faults.Proxy) error { p.HoldReplies(false); p.Cut(); return p.Mend() }, false},
}

// TestBoundFailsClosedThroughPartitions: with the default bound, behind an
// hour-long verdict cache as a service runs it, the watches are
// partitioned each way for three times the bound, and a pod is deleted as
// the partition begins. Its token — whose verdict the cache holds from
// the view — is never accepted later than MaxWatchBreak after the
// deletion, from the view or from the cache, nor at all once the view has
// stopped; a partition the view can observe stops it at once (a watch
// failure, long before its lag reaches the bound), and it never answers
// again while the partition lasts (client-go's empty watches after its own
// retries included). While it is stopped, every token is reviewed
// (fallback "broken"), and a verdict TokenReview gave is reused for at
// most the bound. Once mended, the view answers again only after a
// bookmark or a list: the deletion is refused from the view, a live pod's
// token answered with no review.
func TestBoundFailsClosedThroughPartitions(t *testing.T) {
	for _, p := range partitions {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			be := startBound(t, kube.BoundConfig{NodeName: "node-a"})
			maxBreak := kube.DefaultMaxWatchBreak
			a := authn.NewCache(be.b.Layer(), authn.CacheConfig{TTL: time.Hour})
			ctx := context.Background()
			gone := be.mint(t, devissuer.TokenRequest{Pod: "mon-gone", Node: "node-a"}).Token
			keep := be.mint(t, devissuer.TokenRequest{Pod: "mon-keep", Node: "node-a"}).Token
			for _, tok := range []string{gone, keep} {
				waitUntil(t, "the view answers for the pod", func() bool {
					r, msg, n := be.verdict(t, tok)
					if !r.IsZero() {
						t.Fatalf("before the partition: %s", msg)
					}
					return n == 0
				})
				if _, err := a.Authenticate(ctx, tok); err != nil { // cached from the view
					t.Fatal(err)
				}
			}

			p.cut(be.proxy)
			if err := be.iss.DeletePod("nvsentinel", "mon-gone"); err != nil {
				t.Fatal(err)
			}
			deleted := time.Now()
			var stopped time.Time
			var stoppedWith kube.BoundStats
			for time.Since(deleted) < 3*maxBreak {
				answering := be.b.Healthy()
				if !answering && stopped.IsZero() {
					stopped, stoppedWith = time.Now(), be.b.Stats()
				}
				if answering && !stopped.IsZero() {
					t.Fatalf("the view answers again %s after it stopped, the partition still on: %+v", time.Since(stopped), be.b.Stats())
				}
				_, err := a.Authenticate(ctx, gone)
				switch {
				case err == nil && !stopped.IsZero():
					t.Fatalf("the deleted pod's token accepted after the view stopped (%s after the deletion)", time.Since(deleted))
				case err == nil && time.Since(deleted) > maxBreak:
					t.Fatalf("the deleted pod's token accepted %s after the deletion; the bound is %s", time.Since(deleted), maxBreak)
				case err != nil && authn.ReasonOf(err) != authn.TokenInvalid:
					t.Fatalf("the deleted pod's token: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if stopped.IsZero() {
				t.Fatalf("the view still answers %s into the partition", 3*maxBreak)
			}
			if p.observable && (stoppedWith.WatchFailures == 0 || stoppedWith.Lag >= maxBreak) {
				t.Fatalf("a partition the watch reports stopped the view only by the clock: %+v", stoppedWith)
			}
			// Stopped: a live pod's token is reviewed; its fresh verdict is
			// reused for at most the bound.
			reviewsBefore := be.faults.Count(reviews)
			if _, err := a.Authenticate(ctx, keep); err != nil {
				t.Fatalf("a live pod's token while the view is stopped: %v", err)
			}
			if n := be.faults.Count(reviews) - reviewsBefore; n != 1 {
				t.Fatalf("a live pod's token while the view is stopped: %d TokenReviews; want 1", n)
			}
			if s := be.b.Stats(); s.Broken == 0 || s.Answering {
				t.Fatalf("stats %+v: no fallback counted as broken", s)
			}

			if err := p.mend(be.proxy); err != nil {
				t.Fatal(err)
			}
			// Back within the reflector's backoff (at most the watch's
			// timeout, jittered) and a list or the next bookmark.
			for deadline := time.Now().Add(30 * time.Second); !be.b.Healthy(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the view not answering 30 s after the partition ended: %+v", be.b.Stats())
				}
			}
			if r, msg, n := be.verdict(t, gone); r != authn.TokenInvalid || n != 0 || !strings.Contains(msg, "no longer exists") {
				t.Fatalf("the deleted pod's token once mended: %s, %d TokenReviews; want refused by the view", msg, n)
			}
			if _, err := a.Authenticate(ctx, gone); authn.ReasonOf(err) != authn.TokenInvalid {
				t.Fatalf("the deleted pod's token through the cache once mended: %v", err)
			}
			if r, msg, n := be.verdict(t, keep); !r.IsZero() || n != 0 {
				t.Fatalf("a live pod's token once mended: %s, %d TokenReviews; want the view's answer", msg, n)
			}
			t.Logf("stopped %s after the deletion with %+v; cache %+v", stopped.Sub(deleted).Round(time.Millisecond), stoppedWith, a.Stats())
		})
	}
}

// TestBoundAsksAgainWhatItCachedBeforeItSynced: a verdict cached before the
// view listed, for a pod deleted before the list, is in neither the view
// nor its tombstones; once the view answers, the cache asks again (the
// view, current since after that verdict, does not know the pod) and
// TokenReview refuses it — not at the end of the cache's hour.
func TestBoundAsksAgainWhatItCachedBeforeItSynced(t *testing.T) {
	be := newBound(t, kube.BoundConfig{})
	a := authn.NewCache(be.b.Layer(), authn.CacheConfig{TTL: time.Hour})
	ctx := context.Background()
	tok := be.mint(t, devissuer.TokenRequest{Pod: "mon-1", Node: "node-a"}).Token
	if _, err := a.Authenticate(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := be.iss.DeletePod("nvsentinel", "mon-1"); err != nil {
		t.Fatal(err)
	}
	be.run(t)
	waitUntil(t, "the view synced", be.b.Healthy)
	_, err := a.Authenticate(ctx, tok)
	if authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("a verdict cached before the view listed, its pod deleted: %v", err)
	}
	if s := a.Stats(); s.Reverified != 1 {
		t.Fatalf("cache stats %+v; want the verdict verified again once", s)
	}
}
