package proxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

// TestKubeRBACProxyExamples runs callerauth-proxy with each of
// kube-rbac-proxy's example configuration files, unchanged
// (testdata/kube-rbac-proxy), against a real kube-apiserver holding the
// example's own RBAC manifest: the example's client is let through, an
// account the manifest does not grant is refused rbac_denied, and what
// the example does not allow is refused too.
func TestKubeRBACProxyExamples(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	api := sharedAPIServer(t)
	// The examples' accounts: kube-rbac-proxy's own (allowed to create
	// TokenReviews and SubjectAccessReviews, as in the examples'
	// Deployment), their client (default/default) and one they do not grant.
	for _, sa := range []string{"kube-rbac-proxy", "default", "stranger"} {
		if _, err := api.ServiceAccount(ctx, "default", sa); err != nil {
			t.Fatal(err)
		}
	}
	apply(ctx, t, api, []byte(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-rbac-proxy}
rules:
- apiGroups: ["authentication.k8s.io"]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: ["authorization.k8s.io"]
  resources: [subjectaccessreviews]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-rbac-proxy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-rbac-proxy}
subjects: [{kind: ServiceAccount, name: kube-rbac-proxy, namespace: default}]
`))
	proxyToken, err := api.Token(ctx, "default", "kube-rbac-proxy", nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfigAs(kubeconfig, proxyToken); err != nil {
		t.Fatal(err)
	}
	const aud = "kube-rbac-proxy.default.svc"
	token := map[string]string{}
	for _, sa := range []string{"default", "stranger"} {
		if token[sa], err = api.Token(ctx, "default", sa, []string{aud}, 3600, nil); err != nil {
			t.Fatal(err)
		}
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream saw "+r.Header.Get("X-Remote-User"))
	}))
	t.Cleanup(up.Close)
	ca, err := pki.NewCA("krp-test")
	if err != nil {
		t.Fatal(err)
	}
	// run trusts the CA beside the kubeconfig.
	if _, err := ca.WriteCA(filepath.Join(filepath.Dir(kubeconfig), devissuer.FileCA)); err != nil {
		t.Fatal(err)
	}

	type want struct {
		method, target, who string
		code                int
		reason              string
	}
	const ok = ""
	for _, ex := range []struct {
		name  string
		cases []want
	}{
		{"non-resource-url", []want{
			{"GET", "/metrics", "default", 200, ok},
			{"GET", "/metrics", "stranger", 403, "rbac_denied"},
			{"GET", "/debug", "default", 403, "rbac_denied"},
			{"POST", "/metrics", "default", 403, "rbac_denied"},
		}},
		{"resource-attributes", []want{
			{"GET", "/metrics", "default", 200, ok},
			{"GET", "/anything", "default", 200, ok}, // the attributes do not depend on the path
			{"GET", "/metrics", "stranger", 403, "rbac_denied"},
			{"DELETE", "/metrics", "default", 403, "rbac_denied"},
		}},
		{"rewrites", []want{
			{"GET", "/metrics?namespace=default", "default", 200, ok},
			{"GET", "/metrics?namespace=kube-system", "default", 403, "rbac_denied"},
			{"GET", "/metrics?namespace=default&namespace=kube-system", "default", 403, "rbac_denied"},
			{"GET", "/metrics?namespace=default", "stranger", 403, "rbac_denied"},
			{"GET", "/metrics", "default", 400, "rbac_attributes_invalid"},
		}},
		{"static-auth", []want{
			// The static entry allows every identified caller the metrics
			// subresource of any namespace, without asking.
			{"GET", "/metrics?namespace=default", "default", 200, ok},
			{"GET", "/metrics?namespace=kube-system", "stranger", 200, ok},
			{"GET", "/metrics", "default", 400, "rbac_attributes_invalid"},
			{"GET", "/metrics?namespace=default", "", 401, "token_missing"},
		}},
	} {
		t.Run(ex.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "kube-rbac-proxy", ex.name)
			manifest, err := os.ReadFile(filepath.Join(dir, "client-rbac.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			created := apply(ctx, t, api, manifest)
			defer created.remove(ctx, t, api)
			o := krpOptions(t, ca, kubeconfig, up.URL, aud)
			if cf := filepath.Join(dir, "config-file.yaml"); exists(cf) {
				o.ConfigFile = cf
			}
			s, addr := run(t, o)
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
			// The API server's RBAC authorizer sees the new bindings
			// through an informer: wait until it allows the example's
			// client its first request, asked as the admin.
			first := ex.cases[0]
			waitAllowed(ctx, t, api, s, first.method, first.target)
			for _, c := range ex.cases {
				req, _ := http.NewRequest(c.method, "https://"+addr+c.target, nil)
				if c.who != "" {
					req.Header.Set("Authorization", "Bearer "+token[c.who])
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var refusal struct{ Reason string }
				_ = json.Unmarshal(body, &refusal)
				if resp.StatusCode != c.code || (c.reason != ok && refusal.Reason != c.reason) ||
					(c.code == 200 && !strings.HasPrefix(string(body), "upstream saw system:serviceaccount:default:"+c.who)) {
					t.Errorf("%s %s as %q: %d %s; want %d %s", c.method, c.target, c.who, resp.StatusCode, body, c.code, c.reason)
				}
			}
			if ex.name == "static-auth" {
				vals, err := scrape.Values(s.Registry())
				if err != nil {
					t.Fatal(err)
				}
				if n := vals["proxy_authorization_reviews_total"]; n != 0 || vals["proxy_authorization_static_allows_total"] != 2 {
					t.Errorf("%v SubjectAccessReviews and %v static allows under the static entry; want 0 and 2", n, vals["proxy_authorization_static_allows_total"])
				}
			}
		})
	}
}

// krpOptions are the proxy as the examples run kube-rbac-proxy: RBAC,
// TokenReview through the proxy's own account, one audience.
func krpOptions(t *testing.T, ca *pki.CA, kubeconfig, upstream, aud string) proxy.Options {
	t.Helper()
	addr, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("proxy", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	o := proxy.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput = addr, "", io.Discard
	o.Serve.TLSCertFile, o.Serve.TLSKeyFile = cert, key
	o.Callers.Kubeconfig = kubeconfig
	o.Upstream, o.Callers.Audience, o.Authorization = upstream, aud, proxy.AuthorizationRBAC
	return o
}

func exists(name string) bool { _, err := os.Stat(name); return err == nil }

// created are the RBAC objects apply made, to remove.
type created []func(context.Context) error

func (c created) remove(ctx context.Context, t *testing.T, _ *kubeapi.Server) {
	for _, f := range c {
		if err := f(ctx); err != nil {
			t.Error(err)
		}
	}
}

// apply creates a manifest's RBAC objects as they are (a namespaced one
// without a namespace in default, as kubectl would).
func apply(ctx context.Context, t *testing.T, api *kubeapi.Server, manifest []byte) created {
	t.Helper()
	var out created
	r := api.Client.RbacV1()
	del := metav1.DeleteOptions{}
	for _, doc := range bytes.Split(manifest, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = r.ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			out = append(out, func(ctx context.Context) error { return r.ClusterRoles().Delete(ctx, o.Name, del) })
		case *rbacv1.ClusterRoleBinding:
			_, err = r.ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			out = append(out, func(ctx context.Context) error { return r.ClusterRoleBindings().Delete(ctx, o.Name, del) })
		case *rbacv1.Role:
			o.Namespace = cmpOr(o.Namespace, "default")
			_, err = r.Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			out = append(out, func(ctx context.Context) error { return r.Roles(o.Namespace).Delete(ctx, o.Name, del) })
		case *rbacv1.RoleBinding:
			o.Namespace = cmpOr(o.Namespace, "default")
			_, err = r.RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			out = append(out, func(ctx context.Context) error { return r.RoleBindings(o.Namespace).Delete(ctx, o.Name, del) })
		default:
			t.Fatalf("apply: a %T in the manifest", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// waitAllowed waits until the API server allows default/default the
// proxy's first attributes for method and target, asked as the admin
// (outside the proxy's cache).
func waitAllowed(ctx context.Context, t *testing.T, api *kubeapi.Server, s *proxy.Server, method, target string) {
	t.Helper()
	specs, err := s.Attributes(method, target)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		spec := specs[0]
		spec.User, spec.Groups = "system:serviceaccount:default:default", []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}
		res, err := api.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status.Allowed || s.StaticallyAllowed(spec) {
			return
		}
		if i == 100 {
			t.Fatalf("the API server does not allow %+v after 10 s", spec)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
