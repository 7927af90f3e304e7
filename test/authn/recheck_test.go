package authn_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

// reviewerAndOffline are the real API server's TokenReview (counted) and
// offline verification against its own JWKS, for the audience of these
// tests.
func reviewerAndOffline(t *testing.T) (authn.Layer, *atomic.Int64, authn.Layer) {
	t.Helper()
	kcfg := kube.Config{REST: apiserver.REST, Audiences: []string{audience}, Issuers: []string{kubeapi.Issuer}}
	review, err := kube.New(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	reviews := &atomic.Int64{}
	counting := review.Layer() // what TokenReview states of itself, its reviews counted
	counting.Authenticator = authn.AuthenticatorFunc(func(ctx context.Context, tok string) (*authn.Caller, error) {
		reviews.Add(1)
		return review.Authenticate(ctx, tok)
	})
	offline, err := kube.Offline(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	return counting, reviews, offline.Layer()
}

// TestRecheckAgainstTheAPIServer runs --caller-review-interval's
// authenticator against the real kube-apiserver: a pod-bound token is
// reviewed once, then verified offline against the API server's own JWKS
// (/openid/v1/jwks) with the identity TokenReview gave; once its pod is
// deleted, it is still accepted until the interval runs out and refused
// after (plus the API server's own cache of about 10 s).
func TestRecheckAgainstTheAPIServer(t *testing.T) {
	fixtures(t) // the namespace, the service account and the node
	ctx := context.Background()
	const ns, interval = "matrix", 3 * time.Second
	pod, err := apiserver.Pod(ctx, ns, "recheck-pod", "caller", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := apiserver.Token(ctx, ns, "caller", []string{audience}, 600, pod)
	if err != nil {
		t.Fatal(err)
	}
	counting, reviews, offline := reviewerAndOffline(t)
	r, err := authn.NewRecheck(authn.RecheckConfig{Offline: offline, Review: counting, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	reviewed, err := r.Authenticate(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		c, err := r.Authenticate(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if c.Username != reviewed.Username || c.UID != reviewed.UID || !slices.Equal(c.Groups, reviewed.Groups) || c.PodName != "recheck-pod" ||
			c.PodUID != reviewed.PodUID || c.NodeName != reviewed.NodeName || c.CredentialID != reviewed.CredentialID {
			t.Fatalf("offline identity %+v differs from TokenReview's %+v", c, reviewed)
		}
	}
	if n := reviews.Load(); n != 1 {
		t.Fatalf("%d TokenReviews for 21 verifications of one token within the interval; want 1", n)
	}

	if err := apiserver.Client.CoreV1().Pods(ns).Delete(ctx, "recheck-pod", deleteNow()); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if _, err := r.Authenticate(ctx, tok); err != nil && time.Since(deleted) < interval {
		t.Fatalf("refused within the interval after the deletion, before any review: %v", err)
	}
	var refused time.Duration
	for deadline := deleted.Add(interval + 40*time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := r.Authenticate(ctx, tok); authn.ReasonOf(err) == authn.TokenInvalid {
			refused = time.Since(deleted)
			break
		}
	}
	if refused == 0 {
		t.Fatalf("the deleted pod's token was still accepted %s after the deletion (interval %s)", interval+40*time.Second, interval)
	}
	if refused < interval-time.Second {
		t.Fatalf("refused %s after the deletion, before the interval (%s) ran out: the review was not skipped", refused, interval)
	}
	t.Logf("deleted pod's token refused %s after the deletion (interval %s; the API server's own cache adds up to ~10 s); %d TokenReviews in all, %d verifications offline",
		refused.Round(100*time.Millisecond), interval, reviews.Load(), r.Stats().Offline)
}
