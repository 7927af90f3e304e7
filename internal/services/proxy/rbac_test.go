package proxy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

// TestAccessReviews runs the allow and deny caches against a real
// kube-apiserver with RBAC: one SubjectAccessReview per distinct review
// per TTL (counted in the API server's audit log), a removed grant
// refused once its allow TTL has passed, the cache bounded, concurrent
// asks sharing one review, errors never kept.
func TestAccessReviews(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	api, err := kubeapi.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Stop()
	const ns = "proxy-rbac"
	if err := api.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"reviewer", "client", "intruder"} {
		if _, err := api.ServiceAccount(ctx, ns, sa); err != nil {
			t.Fatal(err)
		}
	}
	rbac := api.Client.RbacV1()
	for _, r := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		sa    string
	}{
		{"proxy-reviewer", []rbacv1.PolicyRule{{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}}, "reviewer"},
		{"metrics-reader", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, "client"},
	} {
		if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.name}, Rules: r.rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: r.name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: r.sa}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reviewerToken, err := api.Token(ctx, ns, "reviewer", nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	a, err := newAccessReviews(api.RESTAs(reviewerToken), accessConfig{AllowTTL: time.Minute, DenyTTL: 10 * time.Second, MaxEntries: 3, Timeout: 10 * time.Second, QPS: 100, Burst: 200, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(sa, path string) authzv1.SubjectAccessReviewSpec {
		return authzv1.SubjectAccessReviewSpec{User: "system:serviceaccount:" + ns + ":" + sa,
			Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"}}
	}
	sars := func() int {
		t.Helper()
		var reqs []kubeapi.Request
		// The audit log is written as requests complete: wait for the last.
		for range 50 {
			if reqs, err = api.Requests("system:serviceaccount:" + ns + ":reviewer"); err != nil {
				t.Fatal(err)
			}
			if len(reqs) == int(a.reviews.Load()) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		n := 0
		for _, r := range reqs {
			if r.Resource == "subjectaccessreviews" && r.Verb == "create" {
				n++
			}
		}
		return n
	}
	ask := func(s authzv1.SubjectAccessReviewSpec) accessAnswer {
		t.Helper()
		ans, err := a.review(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}

	// The API server's RBAC authorizer learns of a binding through its own
	// informer: serverSays waits until it answers want for the granted
	// account, asked as the admin, outside the cache under test.
	serverSays := func(want bool) {
		t.Helper()
		for i := 0; ; i++ {
			res, err := api.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: spec("client", "/metrics")}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status.Allowed == want {
				return
			}
			if i == 100 {
				t.Fatalf("the API server does not answer allowed=%v after 10 s", want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	serverSays(true)

	if ans := ask(spec("client", "/metrics")); !ans.Allowed || ans.Cached {
		t.Fatalf("the granted account, first: %+v", ans)
	}
	if ans := ask(spec("client", "/metrics")); !ans.Allowed || !ans.Cached {
		t.Fatalf("the granted account, again: %+v (want the kept allow)", ans)
	}
	if ans := ask(spec("intruder", "/metrics")); ans.Allowed || ans.Cached {
		t.Fatalf("an account without the grant: %+v", ans)
	}
	if ans := ask(spec("intruder", "/metrics")); ans.Allowed || !ans.Cached {
		t.Fatalf("an account without the grant, again: %+v (want the kept deny)", ans)
	}
	if n := sars(); n != 2 {
		t.Errorf("%d SubjectAccessReviews for 2 distinct reviews asked twice each; want 2", n)
	}

	// The grant removed: the kept allow stands until its TTL, then the
	// API server's deny is the answer.
	if err := rbac.ClusterRoleBindings().Delete(ctx, "metrics-reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's RBAC authorizer learns of the deletion through its
	// own informer: wait until it denies before reading the cache.
	serverSays(false)
	if ans := ask(spec("client", "/metrics")); !ans.Allowed || !ans.Cached {
		t.Fatalf("within the allow TTL: %+v", ans)
	}
	now.Add(int64(time.Minute))
	if ans := ask(spec("client", "/metrics")); ans.Allowed {
		t.Fatalf("past the allow TTL, the grant removed: %+v (want denied)", ans)
	}

	// Concurrent asks of one new review share one request.
	before := a.reviews.Load()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := a.review(ctx, spec("client", "/healthz")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := a.reviews.Load() - before; n > 2 {
		t.Errorf("20 concurrent asks of one review made %d reviews (want 1, 2 at most if one finished before the others began)", n)
	}

	// Bounded: never more than MaxEntries kept.
	for _, p := range []string{"/a", "/b", "/c", "/d"} {
		ask(spec("client", p))
	}
	if n := a.len(); n != 3 {
		t.Errorf("%d answers kept; MaxEntries is 3", n)
	}

	// An error is never kept: a reviewer that may not review.
	clientToken, err := api.Token(ctx, ns, "client", nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := newAccessReviews(api.RESTAs(clientToken), accessConfig{AllowTTL: time.Minute, DenyTTL: time.Second, MaxEntries: 3, Timeout: 10 * time.Second, QPS: 100, Burst: 200})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := bad.review(ctx, spec("client", "/metrics")); err == nil {
			t.Fatal("a reviewer without create on subjectaccessreviews: no error")
		}
	}
	if bad.len() != 0 || bad.reviews.Load() != 2 || bad.failures.Load() != 2 {
		t.Errorf("errors: %d kept, %d reviews, %d failures; want 0 kept and each ask reviewed", bad.len(), bad.reviews.Load(), bad.failures.Load())
	}

	// The rate limit is the configured one, not client-go's 5 a second:
	// with one review a second and a timeout of a tenth of that, the
	// second distinct review cannot be sent in time and fails, kept
	// nowhere; the first is answered.
	slow, err := newAccessReviews(api.RESTAs(reviewerToken), accessConfig{AllowTTL: time.Minute, DenyTTL: time.Second, MaxEntries: 3, Timeout: 100 * time.Millisecond, QPS: 1, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.review(ctx, spec("client", "/metrics")); err != nil {
		t.Fatalf("the first review under the rate limit: %v", err)
	}
	if _, err := slow.review(ctx, spec("client", "/other")); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Errorf("a review that would wait past the timeout for the rate limiter: %v, want a rate limit error", err)
	}
	if slow.len() != 1 || slow.failures.Load() != 1 {
		t.Errorf("under the rate limit: %d kept, %d failures; want the first kept and the second failed", slow.len(), slow.failures.Load())
	}
}
