package chart_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/charts"
	"github.com/callerauth/callerauth/internal/kit/e2e"
)

// appliedChart applies a rendered chart to the real API server and returns
// its objects.
func appliedChart(ctx context.Context, t *testing.T, c *charts.Cluster, chart, release, namespace, values string) []*unstructured.Unstructured {
	t.Helper()
	out, err := renderChart(t, chart, release, namespace, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := apiserver.Namespace(ctx, namespace); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	var docs []string
	for n, d := range out {
		if strings.HasSuffix(n, ".yaml") {
			docs = append(docs, d)
		}
	}
	objs := charts.Objects(t, docs...)
	for _, err := range c.Apply(ctx, namespace, objs) {
		t.Fatal(err)
	}
	return objs
}

func named(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// startPDPAs runs the pdp binary with a kubeconfig carrying token (the
// chart's ServiceAccount's), serving examples/secrets-engine over TLS, and
// returns its URL and process.
func startPDPAs(t *testing.T, token string, extra ...string) (string, *http.Client, *e2e.Process) {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := apiserver.WriteKubeconfigAs(kubeconfig, token); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("pdp")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("localhost", pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, signing := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "signing.pem")
	for p, b := range map[string][]byte{cert: certPEM, key: keyPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := decision.GenerateKeyFile(signing); err != nil {
		t.Fatal(err)
	}
	example := "../../examples/secrets-engine"
	p := e2e.Start(t, pdpBin, append([]string{"--listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key,
		"--policy-dir", filepath.Join(example, "policy"), "--registry", filepath.Join(example, "registry.json"),
		"--kubeconfig", kubeconfig, "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine",
		"--signing-key-file", signing, "--metrics-listen", "", "--caller-cache-ttl", "0"}, extra...))
	addr := p.LogValue(t, "pdp: serving", "address", 60*time.Second)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	return "https://" + addr, client, p
}

func check(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	body, err := os.ReadFile("../../examples/secrets-engine/check_request_allow_rotate.json")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/check", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPDPRunsAsItsChartsServiceAccount: the pdp chart applied to the real
// API server, the real pdp binary run with a token the API server issues
// for the chart's ServiceAccount (TokenRequest) — so every call it makes
// is authorised by the chart's RBAC and nothing else — answers a
// TokenReview-authenticated check; with --caller-watch-bound-objects (the
// chart's option, which adds the list/watch ClusterRole) it watches pods
// and service accounts under that same account. The binding removed, the
// TokenReview is forbidden and the pdp's log names the verb and resource.
func TestPDPRunsAsItsChartsServiceAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := charts.NewCluster(t, apiserver.REST)
	const ns = "flex-auth-sa"
	objs := appliedChart(ctx, t, c, pdpChart, "flex-auth", ns, examplePDPValues(t, set(true, "caller", "watchBoundObjects")))
	sas := named(objs, "ServiceAccount")
	if len(sas) != 1 {
		t.Fatalf("%d ServiceAccounts rendered", len(sas))
	}
	sa := sas[0].GetName()
	// The chart's own token: its projected audience is the API server's.
	pdpToken, err := apiserver.Token(ctx, ns, sa, nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The caller: the principal the binding names, with a token for the
	// pdp's audience.
	if err := apiserver.Namespace(ctx, "secrets-engine"); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	if _, err := apiserver.ServiceAccount(ctx, "secrets-engine", "secrets-engine"); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	caller := func() string {
		tok, err := apiserver.Token(ctx, "secrets-engine", "secrets-engine", []string{"flex-auth"}, 600, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"TokenReview", nil}, {"bound-object watch", []string{"--caller-watch-bound-objects", "--metrics-listen", "127.0.0.1:0"}}} {
		url, client, p := startPDPAs(t, pdpToken, mode.extra...)
		if code, body := check(t, client, url, caller()); code != 200 || !strings.Contains(body, `"effect":"allow"`) {
			t.Fatalf("%s: a check as the chart's ServiceAccount: %d %s\n%s", mode.name, code, body, p.Output())
		}
		if mode.extra != nil {
			// The watches listed pods and service accounts under the chart's
			// ClusterRole.
			metrics := p.LogValue(t, "pdp: serving", "metrics", time.Second)
			synced := false
			for deadline := time.Now().Add(20 * time.Second); !synced && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if resp, err := http.Get("http://" + metrics + "/metrics"); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					synced = strings.Contains(string(b), "pdp_caller_bound_synced 1")
				}
			}
			if !synced {
				t.Errorf("the bound-object watches never synced as the chart's ServiceAccount:\n%s", p.Output())
			}
		}
		if strings.Contains(p.Output(), "forbidden") {
			t.Errorf("%s: the pdp was refused something:\n%s", mode.name, p.Output())
		}
	}

	// What the chart grants and the pdp never used (the audit log of its
	// requests): each must be justified in rbac.yaml.
	reqs, err := apiserver.Requests("system:serviceaccount:" + ns + ":" + sa)
	if err != nil || len(reqs) == 0 {
		t.Fatalf("the audit log of the pdp's requests: %d, %v", len(reqs), err)
	}
	unused := charts.Unused(objs, reqs)
	t.Logf("the pdp made %d requests; granted by the chart and not used: %v", len(reqs), unused)
	for _, u := range unused {
		if u != "list /pods" && u != "list /serviceaccounts" { // the initial list where the API server does not stream it in the watch
			t.Errorf("the chart grants %q, which the pdp never used and rbac.yaml does not justify: least privilege", u)
		}
	}

	// Without the chart's TokenReview binding, the same pdp is refused, and
	// says which verb on which resource.
	var bindingName, roleName string
	for _, b := range named(objs, "ClusterRoleBinding") {
		roleRef, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		if strings.HasSuffix(roleRef, "-tokenreview") {
			bindingName, roleName = b.GetName(), roleRef
		}
	}
	if bindingName == "" {
		t.Fatal("the chart binds no TokenReview ClusterRole")
	}
	if err := apiserver.Client.RbacV1().ClusterRoleBindings().Delete(ctx, bindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = apiserver.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: bindingName}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: roleName},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{})
	}()
	url, client, p := startPDPAs(t, pdpToken)
	code, body := 0, ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		// RBAC caches in the authorizer briefly after a delete.
		if code, body = check(t, client, url, caller()); code != 200 {
			break
		}
	}
	if code == 200 {
		t.Fatalf("a check with the TokenReview binding removed: %d %s", code, body)
	}
	logsIt := func(out string) bool { return strings.Contains(out, `cannot create resource \"tokenreviews\"`) }
	out := p.Output()
	for deadline := time.Now().Add(5 * time.Second); !logsIt(out) && time.Now().Before(deadline); out = p.Output() {
		time.Sleep(50 * time.Millisecond) // the log line is written as the answer leaves
	}
	if !logsIt(out) {
		t.Errorf("the refusal %d %s; the pdp's log does not name the verb and resource:\n%s", code, body, out)
	} else {
		t.Logf("without the binding: %d %s; the pdp logs: cannot create resource \"tokenreviews\"", code, strings.TrimSpace(body))
	}
}
