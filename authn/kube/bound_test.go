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
	cfg.Metadata, cfg.Offline, cfg.Review = metadata.NewForConfigOrDie(watchREST), offline, e.authenticator(t, kcfg)
	b, err := kube.NewBound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "the view synced", b.Healthy)
	return &boundEnv{env: e, b: b, proxy: proxy}
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
func (be *boundEnv) verdict(t *testing.T, tok string) (authn.Reason, string, int) {
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
		if r != "" && r != authn.TokenInvalid {
			t.Fatalf("before the view knew the pod: %s", msg)
		}
		return be.b.Stats().Answered > 0
	})
	for range 20 {
		if r, msg, n := be.verdict(t, tok); r != "" || n != 0 {
			t.Fatalf("a pod-bound token on the watched node: %s, %d TokenReviews", msg, n)
		}
	}

	// A pod of another node is outside the view: reviewed.
	other := be.mint(t, devissuer.TokenRequest{Pod: "mon-2", Node: "node-b"}).Token
	if r, msg, n := be.verdict(t, other); r != "" || n != 1 {
		t.Fatalf("a pod of another node: %s, %d TokenReviews; want accepted after one", msg, n)
	}
	// So is a token bound to no pod.
	unbound := be.mint(t, devissuer.TokenRequest{}).Token
	if r, msg, n := be.verdict(t, unbound); r != "" || n != 1 {
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
	if r, msg, n := be.verdict(t, fresh); r != "" || n != 0 {
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

// TestBoundFallsBackWhileTheWatchIsBroken: the watch connection is cut
// and new ones refused; after MaxWatchBreak every token is reviewed — and
// a pod deleted meanwhile is refused by TokenReview; once the watch is
// back, the view has caught up and answers again with no review.
func TestBoundFallsBackWhileTheWatchIsBroken(t *testing.T) {
	const maxBreak = 300 * time.Millisecond
	be := startBound(t, kube.BoundConfig{MaxWatchBreak: maxBreak})
	tok := be.mint(t, devissuer.TokenRequest{Pod: "mon-1", Node: "node-a"}).Token
	keep := be.mint(t, devissuer.TokenRequest{Pod: "mon-2", Node: "node-a"}).Token
	waitUntil(t, "the view knows the pods", func() bool {
		r1, _, _ := be.verdict(t, tok)
		r2, _, _ := be.verdict(t, keep)
		return r1 == "" && r2 == "" && be.b.Stats().Answered >= 2
	})

	be.proxy.Cut()
	cut := time.Now()
	waitUntil(t, "the view lagging", func() bool { return be.b.Stats().Lag > 0 })
	if time.Since(cut) < maxBreak {
		if r, msg, n := be.verdict(t, tok); r != "" || n != 0 {
			t.Fatalf("within MaxWatchBreak: %s, %d TokenReviews; want the view's answer", msg, n)
		}
	}
	time.Sleep(maxBreak - time.Since(cut) + 50*time.Millisecond)
	if be.b.Healthy() {
		t.Fatalf("healthy %s after the watch was cut", time.Since(cut))
	}
	if r, msg, n := be.verdict(t, tok); r != "" || n != 1 {
		t.Fatalf("past MaxWatchBreak: %s, %d TokenReviews; want accepted by one", msg, n)
	}
	if err := be.iss.DeletePod("nvsentinel", "mon-1"); err != nil {
		t.Fatal(err)
	}
	if r, msg, n := be.verdict(t, tok); r != authn.TokenInvalid || n != 1 {
		t.Fatalf("a pod deleted while the watch is broken: %s, %d TokenReviews; want refused by one", msg, n)
	}

	be.proxy.Mend()
	waitUntil(t, "the watch back", be.b.Healthy)
	waitUntil(t, "the deletion seen", func() bool {
		r, _, n := be.verdict(t, tok)
		return r == authn.TokenInvalid && n == 0
	})
	if r, msg, n := be.verdict(t, keep); r != "" || n != 0 {
		t.Fatalf("after the watch came back: %s, %d TokenReviews; want the view's answer", msg, n)
	}
	s := be.b.Stats()
	t.Logf("stats %+v", s)
	if s.Broken != 2 || s.Lag != 0 {
		t.Fatalf("stats %+v: want 2 tokens reviewed for a broken watch, no lag", s)
	}
}
