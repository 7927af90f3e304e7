package authn_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/reason"
)

// TestBoundObjectsAgainstTheAPIServer: offline verification beside a
// metadata watch of what tokens are bound to, against the real
// kube-apiserver. A pod-bound token is accepted with no TokenReview at
// all; once its pod is deleted it is refused as soon as the watch delivers
// the deletion (seconds, against the review interval's minutes), and stays
// refused when a pod of the same name but another UID is created; the same
// for a deleted service account — all behind an hour-long verdict cache. A
// token the view cannot answer for (bound to no pod) is reviewed.
func TestBoundObjectsAgainstTheAPIServer(t *testing.T) {
	fixtures(t) // the namespace, the service account "caller" and the node
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "matrix"
	counting, reviews, offline := reviewerAndOffline(t)
	b, err := kube.NewBound(kube.BoundConfig{Metadata: metadata.NewForConfigOrDie(apiserver.REST), Offline: offline, Review: counting})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.Start(ctx) }()
	// Behind the verdict cache, as a service runs it: a cached success is
	// checked against the view on every hit.
	a := authn.NewCache(b.Layer(), authn.CacheConfig{TTL: time.Hour})
	for deadline := time.Now().Add(30 * time.Second); !b.Healthy(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the view never synced")
		}
	}
	mint := func(sa, pod string) string {
		t.Helper()
		p, err := apiserver.Pod(ctx, ns, pod, sa, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := apiserver.Token(ctx, ns, sa, []string{audience}, 600, p)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// refusedAfter deletes with del and measures until tok is refused as
	// bound to something gone.
	refusedAfter := func(tok, what string, del func() error) time.Duration {
		t.Helper()
		if err := del(); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		for time.Since(deleted) < 30*time.Second {
			_, err := a.Authenticate(ctx, tok)
			if authn.ReasonOf(err) == authn.TokenInvalid {
				if !strings.Contains(err.Error(), what+" ") || !strings.Contains(err.Error(), "no longer exists") {
					t.Fatalf("refused for another reason: %v", err)
				}
				return time.Since(deleted)
			}
			if err != nil {
				t.Fatalf("while waiting for the refusal: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("the token was still accepted 30 s after its %s was deleted", what)
		return 0
	}

	// holds waits until the view holds n more pods than before.
	holds := func(before, n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); b.Stats().Pods < before+n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the view holds %d pods 10 s on; want %d", b.Stats().Pods, before+n)
			}
		}
	}
	pods := b.Stats().Pods
	tok := mint("caller", "bound-pod")
	holds(pods, 1) // before the first use: else it would be reviewed (and that cached)
	for range 21 {
		if c, err := a.Authenticate(ctx, tok); err != nil || c.PodName != "bound-pod" {
			t.Fatalf("%+v %v", c, err)
		}
	}
	if n := reviews.Load(); n != 0 {
		t.Fatalf("%d TokenReviews for 21 verifications of a pod-bound token; want 0", n)
	}
	podGone := refusedAfter(tok, "pod", func() error {
		return apiserver.Client.CoreV1().Pods(ns).Delete(ctx, "bound-pod", deleteNow())
	})
	// A new pod of the same name has another UID: the token stays refused.
	if _, err := apiserver.Pod(ctx, ns, "bound-pod", "caller", "node-a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := a.Authenticate(ctx, tok); authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("the old token after a pod of the same name was created: %v", err)
	}

	// A deleted service account.
	pods, accounts := b.Stats().Pods, b.Stats().ServiceAccounts
	if _, err := apiserver.ServiceAccount(ctx, ns, "short-lived"); err != nil {
		t.Fatal(err)
	}
	saTok := mint("short-lived", "short-lived-pod")
	holds(pods, 1)
	for deadline := time.Now().Add(10 * time.Second); b.Stats().ServiceAccounts <= accounts; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the view never held the new service account")
		}
	}
	before := reviews.Load()
	if _, err := a.Authenticate(ctx, saTok); err != nil || reviews.Load() != before {
		t.Fatalf("the new service account's token: %v, %d TokenReviews", err, reviews.Load()-before)
	}
	saGone := refusedAfter(saTok, "service account", func() error {
		return apiserver.Client.CoreV1().ServiceAccounts(ns).Delete(ctx, "short-lived", deleteNow())
	})

	// A token bound to no pod: the view cannot answer, TokenReview does.
	unbound, err := apiserver.Token(ctx, ns, "caller", []string{audience}, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	before = reviews.Load()
	if _, err := a.Authenticate(ctx, unbound); err != nil || reviews.Load() != before+1 {
		t.Fatalf("a token bound to no pod: %v, %d reviews", err, reviews.Load()-before)
	}
	s := b.Stats()
	t.Logf("deleted pod's token refused %s after the deletion, deleted service account's %s; %d TokenReviews in all (the unbound token's); %d answered from the view",
		podGone.Round(time.Millisecond), saGone.Round(time.Millisecond), reviews.Load(), s.Answered)
	if s.Unanswerable != 1 || s.Gone == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// partition is one way the view's watches lose the real API server: cut
// starts it, heal ends it (returning when the API server can be reached
// again), observable says the view learns of it from a failed watch, not
// only from its clock.
type partition struct {
	name       string
	cut, heal  func(t *testing.T, p *faults.Proxy)
	observable bool
}

var partitions = []partition{
	// Every connection closed, each new one closed as it is accepted:
	// client-go's own watch retries end in an empty watch.
	{"closed", func(_ *testing.T, p *faults.Proxy) { p.Cut() }, mend, true},
	// Replies swallowed: nothing says anything is wrong.
	{"blackhole", func(_ *testing.T, p *faults.Proxy) { p.HoldReplies(true) }, func(t *testing.T, p *faults.Proxy) {
		p.HoldReplies(false)
		p.Cut()
		mend(t, p)
	}, false},
	// The port closed: dials refused.
	{"refused", func(_ *testing.T, p *faults.Proxy) { p.Refuse() }, mend, true},
	// The API server stopped (SIGTERM, as a rollout does) and started
	// again: TokenReview is down with it. Not observable: a graceful
	// shutdown may keep the watch connections open, and answer or hang,
	// until the process exits — on a loaded machine for longer than the
	// bound (a CI run saw the view stop by its clock, at 12.8 s) — so only
	// the bound is asserted for it, as for swallowed replies.
	{"restart", func(t *testing.T, _ *faults.Proxy) {
		if err := apiserver.StopAPIServer(); err != nil {
			t.Logf("the API server's exit: %v", err)
		}
		// Started again whatever happens, so that a failure here costs
		// the tests after it nothing (after heal: "already running").
		t.Cleanup(func() { _ = apiserver.StartAPIServer(context.Background()) })
	}, func(t *testing.T, _ *faults.Proxy) {
		if err := apiserver.StartAPIServer(context.Background()); err != nil {
			t.Fatal(err)
		}
	}, false},
}

func mend(t *testing.T, p *faults.Proxy) {
	if err := p.Mend(); err != nil {
		t.Fatal(err)
	}
}

// TestBoundFailsClosedAgainstTheAPIServer: the view's watches reach the
// real kube-apiserver through a proxy, with the default bound
// (kube.DefaultMaxWatchBreak), behind an hour-long verdict cache as a
// service runs it, and are partitioned four ways: connections closed,
// replies swallowed, dials refused, the API server restarted. A pod is
// deleted as the partition begins (before the stop, for the restart) and
// another once the view has stopped answering (once the API server is
// back, for the restart). Asserted, probing both tokens every 20 ms from
// the view and through the cache:
//   - no token of a deleted pod is accepted later than the bound after
//     its deletion — or after TokenReview last accepted it: the fallback
//     may itself accept one for milliseconds after the deletion (the API
//     server reads pods from its watch cache), and its verdict stands in
//     the cache for the bound — nor from the view at all when deleted
//     while the view was stopped; one deleted as the partition ends (the
//     restart's, the API server being down before) races the view's
//     recovery and may be answered from a proof taken before its
//     deletion, never from one taken after it;
//   - a partition the watch reports stops the view at once (a failed
//     watch, its lag still under the bound), and a stopped view never
//     answers again while the partition lasts;
//   - while stopped, tokens are reviewed (fallback "broken"; TokenReview's
//     validator_unavailable while the API server is down);
//   - after the partition, the view answers only from a state proven after
//     it stopped, refuses both deleted pods' tokens itself (no review, from
//     the cache too), and answers a live pod's token with no review.
func TestBoundFailsClosedAgainstTheAPIServer(t *testing.T) {
	fixtures(t)
	for _, p := range partitions {
		t.Run(p.name, func(t *testing.T) { failsClosedThrough(t, p) })
	}
}

func failsClosedThrough(t *testing.T, p partition) {
	const ns = "matrix"
	maxBreak := kube.DefaultMaxWatchBreak
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u, err := url.Parse(apiserver.REST.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	watchREST := rest.CopyConfig(apiserver.REST)
	watchREST.Host = "https://" + proxy.Addr()
	counting, reviews, offline := reviewerAndOffline(t)
	b, err := kube.NewBound(kube.BoundConfig{Metadata: metadata.NewForConfigOrDie(watchREST), Offline: offline, Review: counting})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = b.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	a := authn.NewCache(b.Layer(), authn.CacheConfig{TTL: time.Hour})

	tokens := map[string]string{}
	for _, role := range []string{"kept", "early", "late"} {
		pod := p.name + "-" + role
		pd, err := apiserver.Pod(ctx, ns, pod, "caller", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if tokens[role], err = apiserver.Token(ctx, ns, "caller", []string{audience}, 600, pd); err != nil {
			t.Fatal(err)
		}
	}
	fromView := func(role string) (int64, error) {
		before := reviews.Load()
		_, err := b.Authenticate(ctx, tokens[role])
		return reviews.Load() - before, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n1, e1 := fromView("kept")
		n2, e2 := fromView("early")
		n3, e3 := fromView("late")
		if e1 == nil && e2 == nil && e3 == nil && n1+n2+n3 == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view never answered for the three pods: %v %v %v, stats %+v", e1, e2, e3, b.Stats())
		}
	}
	for _, role := range []string{"kept", "early", "late"} {
		if _, err := a.Authenticate(ctx, tokens[role]); err != nil { // cached from the view
			t.Fatal(err)
		}
	}
	del := func(role string) time.Time {
		t.Helper()
		if err := apiserver.Client.CoreV1().Pods(ns).Delete(ctx, p.name+"-"+role, deleteNow()); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}

	// deleted: when each pod was deleted; stopped: when the view stopped
	// answering; healed: when the partition ended.
	deleted := map[string]time.Time{}
	var stopped, healed time.Time
	var stoppedWith kube.BoundStats
	reviewAccepts := 0 // a deleted pod's token accepted by TokenReview itself
	lastReviewAccept := map[string]time.Time{}
	probe := func() {
		t.Helper()
		now := time.Now()
		s := b.Stats()
		switch {
		case !s.Answering && stopped.IsZero():
			stopped, stoppedWith = now, s
		case s.Answering && !stopped.IsZero() && healed.IsZero():
			t.Fatalf("the view answers again %s after it stopped, the partition still on: %+v", now.Sub(stopped), s)
		case s.Answering && !healed.IsZero() && s.Lag >= now.Sub(stopped):
			// A proof asked during the partition may complete after it
			// (client-go retries the list): it proves the state as of
			// when it was asked, which is enough — but never a state
			// from before the view stopped.
			t.Fatalf("the view answers %s after the partition ended from a state proven %s ago, before it stopped: %+v", now.Sub(healed), s.Lag, s)
		}
		for role, at := range deleted {
			for _, via := range []authn.Authenticator{b, a} {
				before, began, proven := reviews.Load(), time.Now(), b.Stats()
				_, err := via.Authenticate(ctx, tokens[role])
				reviewed := reviews.Load() != before
				// The oldest state the view can have answered from: the
				// proof it held before the call (proofs only move on).
				provenAt := began.Add(-proven.Lag)
				switch {
				case err == nil && reviewed:
					// TokenReview's own word: the API server's
					// authenticator reads pods from its own watch cache,
					// and may accept a token for milliseconds after the
					// deletion returned. Its verdict may then stand in the
					// cache for the bound, counted from when it was asked.
					reviewAccepts++
					lastReviewAccept[role] = began
				case err == nil && via == b && !stopped.IsZero() && at.After(stopped) && (healed.IsZero() || at.Before(healed)):
					t.Fatalf("the %s pod's token accepted from the view %s after its deletion, made once the view had stopped", role, time.Since(at))
				case err == nil && via == b && !healed.IsZero() && at.After(healed) && proven.Answering && provenAt.After(at):
					// Deleted after the partition ended (the restart: the
					// API server was down before), racing the view's
					// recovery: it may answer from a proof taken before
					// the deletion, never from one taken after it.
					t.Fatalf("the %s pod's token accepted from the view %s after its deletion, from a state proven %s after it", role, time.Since(at), provenAt.Sub(at))
				}
				from := at
				if lastReviewAccept[role].After(from) {
					from = lastReviewAccept[role]
				}
				switch {
				case err == nil && time.Since(from) > maxBreak:
					t.Fatalf("the %s pod's token accepted %s after its deletion (%s after TokenReview last accepted it); the bound is %s", role, time.Since(at), time.Since(from), maxBreak)
				case err != nil && !slices.Contains([]reason.Reason{authn.TokenInvalid, authn.ValidatorUnavailable, authn.ValidatorTimeout}, authn.ReasonOf(err)):
					t.Fatalf("the %s pod's token: %v", role, err)
				}
			}
		}
	}

	if p.name == "restart" {
		deleted["early"] = del("early")
	}
	p.cut(t, proxy)
	cut := time.Now()
	if p.name != "restart" {
		deleted["early"] = del("early")
	}
	for stopped.IsZero() {
		if time.Since(cut) > 3*maxBreak {
			t.Fatalf("the view still answers %s into the partition: %+v", time.Since(cut), b.Stats())
		}
		probe()
		time.Sleep(20 * time.Millisecond)
	}
	if p.observable && (stoppedWith.WatchFailures == 0 || stoppedWith.Lag >= maxBreak) {
		t.Fatalf("a partition the watch reports stopped the view only by the clock: %+v", stoppedWith)
	}
	if p.name != "restart" {
		deleted["late"] = del("late")
	}
	// While stopped: a live pod's token is reviewed.
	n, err := fromView("kept")
	switch {
	case n != 1:
		t.Fatalf("a live pod's token while the view is stopped: %v, %d TokenReviews; want one", err, n)
	case p.name == "restart" && authn.ReasonOf(err) != authn.ValidatorUnavailable && authn.ReasonOf(err) != authn.ValidatorTimeout:
		t.Fatalf("a live pod's token with the API server down: %v; want validator_unavailable", err)
	case p.name != "restart" && err != nil:
		t.Fatalf("a live pod's token while the view is stopped: %v", err)
	}
	for time.Since(cut) < 2*maxBreak+5*time.Second {
		probe()
		time.Sleep(20 * time.Millisecond)
	}

	healed = time.Now()
	p.heal(t, proxy)
	if p.name == "restart" {
		deleted["late"] = del("late")
	}
	for !b.Healthy() {
		if time.Since(healed) > time.Minute {
			t.Fatalf("the view not answering a minute after the partition ended: %+v", b.Stats())
		}
		probe()
		time.Sleep(20 * time.Millisecond)
	}
	back := time.Since(healed)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		probe()
		n1, e1 := fromView("early")
		n2, e2 := fromView("late")
		_, c1 := a.Authenticate(ctx, tokens["early"])
		_, c2 := a.Authenticate(ctx, tokens["late"])
		if n1+n2 == 0 && strings.Contains(fmt.Sprint(e1), "no longer exists") && strings.Contains(fmt.Sprint(e2), "no longer exists") &&
			authn.ReasonOf(c1) == authn.TokenInvalid && authn.ReasonOf(c2) == authn.TokenInvalid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted pods' tokens after the partition: %v (%d reviews), %v (%d), through the cache %v, %v", e1, n1, e2, n2, c1, c2)
		}
	}
	if n, err := fromView("kept"); err != nil || n != 0 {
		t.Fatalf("a live pod's token after the partition: %v, %d TokenReviews; want the view's answer", err, n)
	}
	s := b.Stats()
	t.Logf("%s: stopped %s after the partition began (lag %s, %d watch failures); answering again %s after it ended; a deleted pod's token accepted by TokenReview itself %d times; stats %+v; cache %+v",
		p.name, stopped.Sub(cut).Round(time.Millisecond), stoppedWith.Lag.Round(time.Millisecond), stoppedWith.WatchFailures, back.Round(time.Millisecond), reviewAccepts, s, a.Stats())
	if s.Broken == 0 {
		t.Fatalf("stats %+v: no token counted as reviewed for a stopped view", s)
	}
}

// TestOfflineLearnsTheAPIServersIssuer: without --caller-issuer, offline
// verification takes the issuer from the real API server's discovery
// document.
func TestOfflineLearnsTheAPIServersIssuer(t *testing.T) {
	fixtures(t)
	offline, err := kube.Offline(kube.Config{REST: apiserver.REST, Audiences: []string{audience}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := apiserver.Token(context.Background(), "matrix", "caller", []string{audience}, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := offline.Authenticate(context.Background(), tok); err != nil || c.Issuer != kubeapi.Issuer {
		t.Fatalf("%+v %v; want issuer %s", c, err, kubeapi.Issuer)
	}
}
