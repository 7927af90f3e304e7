package proxy_test

// The figures docs/scale.md and docs/performance.md quote: what the real
// kube-apiserver receives while callerauth-proxy (each backend) and
// controller-runtime's filter answer 10,000 requests from 100 callers, and
// how soon a deleted pod and a removed RBAC grant are refused through the
// proxy. Times are logged, never asserted; counts are asserted against
// the goal (one TokenReview and one SubjectAccessReview per caller per
// TTL, no TokenReview with the bound-object watch).

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

const (
	loadCallers  = 100
	loadRequests = 10000
	loadWorkers  = 16
	loadAudience = "hello.proxy.svc"
	// readersGroup is the group the OIDC callers' tokens name.
	readersGroup = "hello-readers"
)

// cluster is what the figures tests set up once in the API server: the
// role that lets a caller GET /hello, the callers and their tokens, one
// reviewer account per proxy under test (so that the audit log tells
// their requests apart), the CA the proxies' certificates come from.
type cluster struct {
	api *kubeapi.Server
	ca  *pki.CA
	dir string
	// pods are the callers' pods (namespace load, node-a); bound their
	// tokens for the proxy's audience, bound to the pod; forAPI their
	// tokens for the API server's own audience (what controller-runtime's
	// filter accepts: it reviews without an audience).
	pods   []*corev1.Pod
	bound  []string
	forAPI []string
	// oidc are 100 identities of an identity provider (a dev issuer)
	// in readersGroup, and the AuthenticationConfiguration that reads them.
	oidc       []string
	authConfig string
}

func newCluster(ctx context.Context, t *testing.T) *cluster {
	t.Helper()
	api := sharedAPIServer(t)
	c := &cluster{api: api, dir: t.TempDir()}
	var err error
	if c.ca, err = pki.NewCA("figures"); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"load", "proxies", "revoke"} {
		if err := api.Namespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.Node(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	r := api.Client.RbacV1()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "hello-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/hello"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}))
	for name, group := range map[string]string{"hello-load": "system:serviceaccounts:load", "hello-oidc": readersGroup} {
		must(r.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "hello-reader"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: group}}}, metav1.CreateOptions{}))
	}
	// What a proxy's account needs: TokenReviews and SubjectAccessReviews,
	// and, for the bound-object watch, the metadata of pods and service
	// accounts.
	must(r.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reviewer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "serviceaccounts"}, Verbs: []string{"list", "watch"}},
		}}, metav1.CreateOptions{}))
	for i := range loadCallers {
		sa := fmt.Sprintf("caller-%03d", i)
		if _, err := api.ServiceAccount(ctx, "load", sa); err != nil {
			t.Fatal(err)
		}
		p, err := api.Pod(ctx, "load", sa, sa, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		b, err := api.Token(ctx, "load", sa, []string{loadAudience}, 3600, p)
		if err != nil {
			t.Fatal(err)
		}
		a, err := api.Token(ctx, "load", sa, nil, 3600, p)
		if err != nil {
			t.Fatal(err)
		}
		c.pods, c.bound, c.forAPI = append(c.pods, p), append(c.bound, b), append(c.forAPI, a)
	}

	// The identity provider, and the file the oidc backend reads.
	iss, err := devissuer.Open(filepath.Join(c.dir, "idp"), devissuer.Config{Issuer: "https://idp.figures.example"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	idpCA, err := os.ReadFile(iss.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	for i := range loadCallers {
		tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: fmt.Sprintf("user-%03d", i), Audiences: []string{loadAudience},
			Claims: map[string]any{"groups": []string{readersGroup}}})
		if err != nil {
			t.Fatal(err)
		}
		c.oidc = append(c.oidc, tok.Token)
	}
	c.authConfig = filepath.Join(c.dir, "authentication-config.yaml")
	doc := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %s
    discoveryURL: %s/.well-known/openid-configuration
    certificateAuthority: |
      %s
    audiences: [%s]
  claimMappings:
    username: {claim: sub, prefix: "oidc:"}
    groups: {claim: groups, prefix: ""}
`, iss.Issuer(), srv.URL, strings.ReplaceAll(strings.TrimSpace(string(idpCA)), "\n", "\n      "), loadAudience)
	if err := os.WriteFile(c.authConfig, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// reviewer creates the account a proxy runs as, bound to the reviewer
// role, and returns its username and a kubeconfig beside the CA the
// proxies' certificates come from (run trusts that file).
func (c *cluster) reviewer(ctx context.Context, t *testing.T, name string) (string, string) {
	t.Helper()
	if _, err := c.api.ServiceAccount(ctx, "proxies", name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.api.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reviewer-" + name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reviewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "proxies"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := c.api.Token(ctx, "proxies", name, nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.api.WriteKubeconfigAs(kubeconfig, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ca.WriteCA(filepath.Join(dir, devissuer.FileCA)); err != nil {
		t.Fatal(err)
	}
	return "system:serviceaccount:proxies:" + name, kubeconfig
}

// reviews counts the TokenReviews and SubjectAccessReviews user sent.
func (c *cluster) reviews(t *testing.T, user string) (tokenReviews, accessReviews int) {
	t.Helper()
	reqs, err := c.api.Requests(user)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		switch {
		case r.Verb == "create" && r.Resource == "tokenreviews":
			tokenReviews++
		case r.Verb == "create" && r.Resource == "subjectaccessreviews":
			accessReviews++
		}
	}
	return tokenReviews, accessReviews
}

// load sends n GETs of /hello through base from loadWorkers workers, the
// i-th with tokens[i % len(tokens)], and returns how many were not 200
// (the first such answer described) and how long it took.
func load(client *http.Client, base string, tokens []string, n int) (failed int64, first string, took time.Duration) {
	var next, bad atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range loadWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				code, body, err := get(client, base+"/hello", tokens[i%int64(len(tokens))])
				if err != nil || code != http.StatusOK {
					bad.Add(1)
					once.Do(func() { first = fmt.Sprintf("request %d: %d %s %v", i, code, body, err) })
				}
			}
		})
	}
	wg.Wait()
	return bad.Load(), first, time.Since(start)
}

func get(client *http.Client, url, tok string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

func (c *cluster) client() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: loadWorkers,
		TLSClientConfig: &tls.Config{RootCAs: c.ca.Pool(), MinVersion: tls.VersionTLS12}}}
}

// hello is the handler every run protects.
var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello\n") })

// proxyIn starts callerauth-proxy in front of upstream as the reviewer
// account name, on the backend set applies, authorizing by RBAC with
// allowTTL, and returns it and its https:// base.
func (c *cluster) proxyIn(ctx context.Context, t *testing.T, name, upstream string, allowTTL time.Duration, set func(o *proxy.Options, kubeconfig string)) (*proxy.Server, string, string) {
	t.Helper()
	user, kubeconfig := c.reviewer(ctx, t, name)
	o := krpOptions(t, c.ca, kubeconfig, upstream, loadAudience)
	o.AuthorizationAllowTTL = allowTTL
	if set != nil {
		set(&o, kubeconfig)
	}
	s, addr := run(t, o)
	return s, "https://" + addr, user
}

// waitSynced waits until the proxy's bound-object view answers (listed
// and proven current: before that every token is reviewed) holding at
// least pods pods.
func waitSynced(t *testing.T, s *proxy.Server, pods int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, err := scrape.Values(s.Registry())
		if err != nil {
			t.Fatal(err)
		}
		if v["proxy_caller_bound_answering"] == 1 && v["proxy_caller_bound_objects{pods}"] >= float64(pods) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bound-object view does not answer with %d pods 30 s on: %v", pods, v)
		}
	}
}

// TestAPIServerRequests: 10,000 requests from 100 callers through
// callerauth-proxy on each backend and through controller-runtime's
// filter, in front of the same handler; the TokenReviews and
// SubjectAccessReviews the API server logged for each.
func TestAPIServerRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := newCluster(ctx, t)
	up := httptest.NewServer(hello)
	defer up.Close()
	// Wait until the API server's RBAC allows the callers, asked as the
	// admin: else the first answers would be denials, cached.
	waitRBAC(ctx, t, c.api, "system:serviceaccount:load:caller-000", []string{"system:serviceaccounts:load"})
	waitRBAC(ctx, t, c.api, "oidc:user-000", []string{readersGroup})

	type row struct {
		name                        string
		tokenReviews, accessReviews int
		took                        time.Duration
	}
	var rows []row
	client := c.client()
	for _, b := range []struct {
		name   string
		tokens []string
		set    func(o *proxy.Options, kubeconfig string)
		// zeroReviews: the backend sends no TokenReview.
		zeroReviews bool
	}{
		{"tokenreview", c.bound, nil, false},
		{"watch", c.bound, func(o *proxy.Options, _ string) { o.Callers.WatchBoundObjects = true }, true},
		{"authconfig", c.oidc, func(o *proxy.Options, kubeconfig string) {
			o.Callers.Backend, o.Callers.AuthenticationConfig, o.Callers.Kubeconfig = callers.BackendOIDC, c.authConfig, ""
			o.AuthorizationKubeconfig = kubeconfig
		}, true},
	} {
		s, base, user := c.proxyIn(ctx, t, b.name, up.URL, proxy.DefaultAuthorizationAllowTTL, b.set)
		if b.name == "watch" {
			waitSynced(t, s, loadCallers)
		}
		failed, first, took := load(client, base, b.tokens, loadRequests)
		if failed > 0 {
			t.Fatalf("%s: %d of %d requests refused or failed; the first: %s", b.name, failed, loadRequests, first)
		}
		trs, sars := c.reviews(t, user)
		rows = append(rows, row{"callerauth-proxy, " + b.name, trs, sars, took})
		// The goal: at most one of each per caller per TTL.
		maxTR := loadCallers * (1 + int(took/callers.NewOptions().CacheTTL))
		maxSAR := loadCallers * (1 + int(took/proxy.DefaultAuthorizationAllowTTL))
		if b.zeroReviews {
			maxTR = 0
		}
		if trs > maxTR || sars > maxSAR || sars == 0 {
			t.Errorf("%s: %d TokenReviews and %d SubjectAccessReviews for %d requests from %d callers in %s; want at most %d and %d (and some SubjectAccessReviews)",
				b.name, trs, sars, loadRequests, loadCallers, took, maxTR, maxSAR)
		}
	}

	// controller-runtime's filter in front of the same handler, on the
	// client controller-runtime's own configuration loader makes (20 QPS,
	// burst 30). It reviews tokens without an audience: the callers send
	// tokens for the API server itself.
	user, _ := c.reviewer(ctx, t, "filter")
	tok, err := c.api.Token(ctx, "proxies", "filter", nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.api.RESTAs(tok)
	cfg.QPS, cfg.Burst = 20, 30
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	h, err := filter(logr.Discard(), hello)
	if err != nil {
		t.Fatal(err)
	}
	fs := httptest.NewTLSServer(h)
	defer fs.Close()
	failed, first, took := load(fs.Client(), fs.URL, c.forAPI, loadRequests)
	if failed > 0 {
		t.Fatalf("controller-runtime's filter: %d of %d requests refused or failed; the first: %s", failed, loadRequests, first)
	}
	trs, sars := c.reviews(t, user)
	rows = append(rows, row{"controller-runtime filter", trs, sars, took})

	var b strings.Builder
	fmt.Fprintf(&b, "%d requests from %d callers, %d workers:\n", loadRequests, loadCallers, loadWorkers)
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", r.name, r.tokenReviews, r.accessReviews, r.took.Round(time.Millisecond))
	}
	t.Log(b.String())
}

var (
	sharedOnce sync.Once
	shared     *kubeapi.Server
	sharedErr  error
)

// sharedAPIServer is the package's one kube-apiserver, started by the
// first test that needs it and stopped by TestMain.
func sharedAPIServer(t *testing.T) *kubeapi.Server {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared, sharedErr = kubeapi.Start(ctx)
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

// allowed asks the API server, as the admin, whether user in groups may
// GET /hello.
func allowed(ctx context.Context, t *testing.T, api *kubeapi.Server, user string, groups []string) bool {
	t.Helper()
	res, err := api.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user, Groups: append(groups, "system:authenticated"),
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/hello", Verb: "get"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status.Allowed
}

// waitRBAC waits until the API server allows user in groups GET /hello.
func waitRBAC(ctx context.Context, t *testing.T, api *kubeapi.Server, user string, groups []string) {
	t.Helper()
	for i := 0; ; i++ {
		if allowed(ctx, t, api, user, groups) {
			return
		}
		if i == 100 {
			t.Fatalf("the API server does not allow %s GET /hello after 10 s", user)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRevocationThroughTheProxy: a deleted pod's token refused through the
// proxy on the bound-object watch, and an RBAC grant removed refused
// within the allow TTL; both times logged.
func TestRevocationThroughTheProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	api := sharedAPIServer(t)
	ca, err := pki.NewCA("revocation")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{api: api, ca: ca, dir: t.TempDir()}
	r := api.Client.RbacV1()
	if _, err := r.ClusterRoles().Get(ctx, "reviewer", metav1.GetOptions{}); err != nil {
		// Run alone: the roles TestAPIServerRequests would have made.
		newCluster(ctx, t)
	}
	if err := api.Namespace(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(hello)
	defer up.Close()
	client := c.client()
	expect := func(base, tok string, code int, reason string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			got, body, err := get(client, base+"/hello", tok)
			if err != nil {
				t.Fatal(err)
			}
			if got == code && strings.Contains(body, reason) {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("%s: %d %s %s on; want %d %s", base, got, body, within, code, reason)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// A deleted pod, on the bound-object watch.
	if _, err := api.ServiceAccount(ctx, "gone", "caller"); err != nil {
		t.Fatal(err)
	}
	// gone's callers are let through by a binding of their own.
	if _, err := r.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "hello-gone"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "hello-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "caller", Namespace: "gone"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRBAC(ctx, t, api, "system:serviceaccount:gone:caller", nil)
	pod, err := api.Pod(ctx, "gone", "doomed", "caller", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := api.Token(ctx, "gone", "caller", []string{loadAudience}, 3600, pod)
	if err != nil {
		t.Fatal(err)
	}
	s, base, user := c.proxyIn(ctx, t, "watch-revoke", up.URL, 5*time.Second, func(o *proxy.Options, _ string) { o.Callers.WatchBoundObjects = true })
	waitSynced(t, s, 1)
	expect(base, tok, http.StatusOK, "hello", 0)
	if err := api.Client.CoreV1().Pods("gone").Delete(ctx, "doomed", deleteNow()); err != nil {
		t.Fatal(err)
	}
	podGone := expect(base, tok, http.StatusUnauthorized, "token_invalid", 30*time.Second)
	trs, _ := c.reviews(t, user)
	if trs != 0 {
		t.Errorf("%d TokenReviews on the bound-object watch; want 0", trs)
	}

	// A removed grant, on TokenReview, with a 5 s allow TTL.
	if _, err := api.ServiceAccount(ctx, "gone", "granted"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "hello-granted"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "hello-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "granted", Namespace: "gone"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRBAC(ctx, t, api, "system:serviceaccount:gone:granted", nil)
	granted, err := api.Token(ctx, "gone", "granted", []string{loadAudience}, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	const allowTTL = 5 * time.Second
	_, base, _ = c.proxyIn(ctx, t, "rbac-revoke", up.URL, allowTTL, nil)
	expect(base, granted, http.StatusOK, "hello", 0)
	if err := r.ClusterRoleBindings().Delete(ctx, "hello-granted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Within the allow TTL plus the API server's own RBAC informer's lag;
	// the bound is generous, the time is logged.
	grantGone := expect(base, granted, http.StatusForbidden, "rbac_denied", allowTTL+30*time.Second)
	t.Logf("through callerauth-proxy: a deleted pod's token refused %s after the deletion (bound-object watch, 0 TokenReviews); a removed ClusterRoleBinding refused %s after the removal (allow TTL %s)",
		podGone.Round(time.Millisecond), grantGone.Round(time.Millisecond), allowTTL)
}

func deleteNow() metav1.DeleteOptions {
	zero := int64(0)
	return metav1.DeleteOptions{GracePeriodSeconds: &zero}
}
