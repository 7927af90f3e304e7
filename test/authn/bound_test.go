package authn_test

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
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/test/kubeapi"
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
	a := authn.NewCache(b, authn.CacheConfig{TTL: time.Hour})
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

// TestBoundWatchBreakAgainstTheAPIServer: the view's watches reach the
// real kube-apiserver through a proxy the test cuts. Past MaxWatchBreak
// every token is reviewed; a pod deleted during the break is refused from
// the view once the watch is back, and a live pod's token is answered by
// the view again with no review.
func TestBoundWatchBreakAgainstTheAPIServer(t *testing.T) {
	fixtures(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, maxBreak = "matrix", time.Second
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
	b, err := kube.NewBound(kube.BoundConfig{Metadata: metadata.NewForConfigOrDie(watchREST), Offline: offline, Review: counting, MaxWatchBreak: maxBreak})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.Start(ctx) }()
	tokens := map[string]string{}
	for _, pod := range []string{"break-kept", "break-deleted"} {
		p, err := apiserver.Pod(ctx, ns, pod, "caller", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if tokens[pod], err = apiserver.Token(ctx, ns, "caller", []string{audience}, 600, p); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); b.Stats().Pods < 2 || !b.Healthy(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the view never held both pods: %+v", b.Stats())
		}
	}
	check := func(pod string) (int64, error) {
		before := reviews.Load()
		_, err := b.Authenticate(ctx, tokens[pod])
		return reviews.Load() - before, err
	}
	if n, err := check("break-kept"); err != nil || n != 0 {
		t.Fatalf("before the break: %v, %d TokenReviews", err, n)
	}

	proxy.Cut()
	cut := time.Now()
	for b.Healthy() {
		if time.Since(cut) > maxBreak+45*time.Second {
			t.Fatal("the view still answers 45 s past MaxWatchBreak with its watches cut")
		}
		time.Sleep(20 * time.Millisecond)
	}
	unhealthy := time.Since(cut)
	if n, err := check("break-kept"); err != nil || n != 1 {
		t.Fatalf("with the watch broken: %v, %d TokenReviews; want accepted by one", err, n)
	}
	if err := apiserver.Client.CoreV1().Pods(ns).Delete(ctx, "break-deleted", deleteNow()); err != nil {
		t.Fatal(err)
	}

	proxy.Mend()
	mended := time.Now()
	for !b.Healthy() {
		if time.Since(mended) > 30*time.Second {
			t.Fatal("the view did not recover within 30 s of the watch coming back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovered := time.Since(mended)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := check("break-deleted")
		if authn.ReasonOf(err) == authn.TokenInvalid && n == 0 && strings.Contains(err.Error(), "no longer exists") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod deleted during the break, after recovery: %v, %d TokenReviews", err, n)
		}
	}
	if n, err := check("break-kept"); err != nil || n != 0 {
		t.Fatalf("after recovery: %v, %d TokenReviews; want the view's answer", err, n)
	}
	s := b.Stats()
	t.Logf("watch cut: fell back to TokenReview after %s (MaxWatchBreak %s); mended: answering again after %s; stats %+v",
		unhealthy.Round(10*time.Millisecond), maxBreak, recovered.Round(10*time.Millisecond), s)
	if s.Broken == 0 {
		t.Fatalf("stats %+v: no token counted as reviewed for a broken watch", s)
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
