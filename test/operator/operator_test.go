// Package operator_test runs the whole vmafx chain for real: the
// kube-apiserver with the VmafxJob CRD, two tenants' Ory Hydra identity
// providers, callerauth-refresher keeping the operator's and the
// node's token files current, and the vmafx-controller, vmafx-node and
// vmafx-operator binaries. It checks the seed's consequences as a user sees
// them in the VmafxJob's status and events.
package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/charts"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/hydra"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
)

var (
	bins      map[string]string
	apiserver *kubeapi.Server
	jobs      = schema.GroupVersionResource{Group: "vmafx.callerauth.dev", Version: "v1alpha1", Resource: "vmafxjobs"}
	crds      = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

func TestMain(m *testing.M) {
	e2e.Main(m, &bins, []string{"cmd/vmafx-controller", "cmd/vmafx-node", "cmd/vmafx-operator", "cmd/callerauth-refresher"}, kubeapi.ForTests(&apiserver))
}

func write(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// installCRD applies the committed CRD and waits until it is served.
func installCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/crds/vmafx.callerauth.dev_vmafxjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var obj unstructured.Unstructured
	if err := json.Unmarshal(j, &obj.Object); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := dyn.Resource(crds).Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := dyn.Resource(jobs).Namespace("default").List(ctx, metav1.ListOptions{}); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the VmafxJob CRD is not served")
		}
	}
}

func TestOperator(t *testing.T) {
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(apiserver.REST)
	if err != nil {
		t.Fatal(err)
	}
	installCRD(t, dyn)
	for _, ns := range []string{"team-a", "vmafx-system"} {
		if err := apiserver.Namespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	ca, err := pki.NewCA("operator e2e")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	// Two tenants, each with its own Hydra; tokens live 12 s, so that a
	// stopped refresher shows within the test.
	idp := map[string]*hydra.Server{}
	var issuers oidc.Config
	for _, name := range []string{"tenant-a", "tenant-b"} {
		d := filepath.Join(dir, name)
		_ = os.MkdirAll(d, 0o700)
		h, err := hydra.Start(ctx, d, ca, 12*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Stop)
		idp[name] = h
		issuers.Issuers = append(issuers.Issuers, oidc.IssuerConfig{Issuer: h.Issuer, Audiences: []string{"vmafx-controller"}, CAFile: caFile, Tenant: name, RolesClaim: "scp"})
	}
	authnConfig, _, err := authconfig.Convert(issuers)
	if err != nil {
		t.Fatal(err)
	}
	// The controller.
	certPEM, keyPEM, _ := ca.Issue("127.0.0.1", "127.0.0.1")
	cert, key := write(t, filepath.Join(dir, "ctl.crt"), string(certPEM)), write(t, filepath.Join(dir, "ctl.key"), string(keyPEM))
	ctl := e2e.Start(t, bins["vmafx-controller"], []string{"--listen", "127.0.0.1:0", "--metrics-listen", "", "--tls-cert-file", cert, "--tls-key-file", key,
		"--caller-authentication-config", write(t, filepath.Join(dir, "authn.yaml"), string(authnConfig)), "--datastore", filepath.Join(dir, "jobs.db"), "--lease", "3s"})
	addr := ctl.LogValue(t, "controller: serving", "address", 60*time.Second)
	// A refresher keeps each token file current from its tenant's Hydra.
	refresher := func(tenantName, client string, scopes ...string) (string, func() *e2e.Process) {
		secret, err := idp[tenantName].Client(client, scopes, "vmafx-controller")
		if err != nil {
			t.Fatal(err)
		}
		secretFile := write(t, filepath.Join(dir, client+".secret"), secret)
		tokenFile := filepath.Join(dir, client+".token")
		args := []string{"--token-url", idp[tenantName].TokenURL, "--ca-file", caFile, "--client-id", client,
			"--client-secret-file", secretFile, "--audience", "vmafx-controller", "--out", tokenFile}
		for _, s := range scopes {
			args = append(args, "--scope", s)
		}
		return tokenFile, func() *e2e.Process { return e2e.Start(t, bins["callerauth-refresher"], args) }
	}
	connection := func(name, tokenFile string) string {
		return write(t, filepath.Join(dir, name+".yaml"), fmt.Sprintf("controller:\n  address: %s\n  tls: true\n  ca_file: %s\n  server_name: 127.0.0.1\n  token_file: %s\n", addr, caFile, tokenFile))
	}
	opToken, startOpRefresher := refresher("tenant-a", "operator-a", "vmafx:reader", "vmafx:submitter")
	opRefresher := startOpRefresher()
	nodeToken, startNodeRefresher := refresher("tenant-a", "node-a1", "vmafx:node")
	startNodeRefresher()
	waitFile(t, opToken)
	waitFile(t, nodeToken)
	e2e.Start(t, bins["vmafx-node"], []string{"--config", connection("node", nodeToken), "--poll", "200ms", "--report-every", "1s",
		"--clip-root", filepath.Join(dir, "clips"), "--metrics-listen", "127.0.0.1:0"})
	// The operator runs as the vmafx chart's operator ServiceAccount, with
	// the chart's RBAC and nothing else: its ServiceAccount, ClusterRole,
	// leader-election Role and their bindings applied to the API server, and
	// a token the API server issues for that account.
	kubeconfig := filepath.Join(dir, "kubeconfig")
	saToken, opRBAC := chartOperatorToken(ctx, t)
	if err := apiserver.WriteKubeconfigAs(kubeconfig, saToken); err != nil {
		t.Fatal(err)
	}
	op := e2e.Start(t, bins["vmafx-operator"], []string{"--kubeconfig", kubeconfig, "--config", connection("operator", opToken), "--poll", "300ms",
		"--leader-election-namespace", "vmafx-system", "--metrics-listen", "127.0.0.1:0"})
	// The skeleton serves the operator's /readyz once the informer has
	// synced (and /metrics: checked at the end).
	opMetrics := "http://" + op.LogValue(t, "operator: serving", "metrics", 60*time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := httpGet(opMetrics + "/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the operator's /readyz never answered 200")
		}
	}
	clips := filepath.Join(dir, "clips", "tenant-a") // the node's tenant's clip directory
	_ = os.MkdirAll(clips, 0o700)
	ref, dist := filepath.Join(clips, "ref.y4m"), filepath.Join(clips, "dist.y4m")
	if err := clipgen.WriteFile(ref, clipgen.Spec{Width: 96, Height: 64, Frames: 6}); err != nil {
		t.Fatal(err)
	}
	if err := clipgen.WriteFile(dist, clipgen.Spec{Width: 96, Height: 64, Frames: 6, Noise: 6, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	ref, dist = "ref.y4m", "dist.y4m" // as a job names them: relative to the tenant's clip directory
	create := func(name string, spec map[string]any) {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "vmafx.callerauth.dev/v1alpha1", "kind": "VmafxJob",
			"metadata": map[string]any{"name": name, "namespace": "team-a"}, "spec": spec}}
		if _, err := dyn.Resource(jobs).Namespace("team-a").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string, until func(map[string]any) bool) map[string]any {
		t.Helper()
		var st map[string]any
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			obj, err := dyn.Resource(jobs).Namespace("team-a").Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				st, _ = obj.Object["status"].(map[string]any)
				if st != nil && until(st) {
					return st
				}
			}
		}
		t.Fatalf("VmafxJob %s never got there; status %v", name, st)
		return nil
	}
	phase := func(p string) func(map[string]any) bool {
		return func(st map[string]any) bool { return st["phase"] == p }
	}

	t.Run("Pending → Running → Succeeded with the node's scores", func(t *testing.T) {
		// 1080p black frames in a sparse file, a few seconds of measuring:
		// Running can be seen before Succeeded.
		if err := clipgen.WriteSparse(filepath.Join(clips, "long.y4m"), 1920, 1080, 300); err != nil {
			t.Fatal(err)
		}
		create("measure", map[string]any{"reference": "long.y4m", "distorted": "long.y4m", "metrics": []any{"psnr", "ssim"}})
		status("measure", phase("Running"))
		st := status("measure", phase("Succeeded"))
		scores, _ := st["scores"].([]any)
		if len(scores) != 2 || !strings.Contains(fmt.Sprint(st["summary"]), "psnr=") || st["jobID"] == "" {
			t.Fatalf("status %v", st)
		}
	})

	t.Run("tenant B's job stays Pending with the refusal in a condition and an event", func(t *testing.T) {
		// A job submitted by tenant B's CLI, tracked by tenant A's operator.
		bToken, startB := refresher("tenant-b", "cli-b", "vmafx:submitter")
		startB()
		waitFile(t, bToken)
		jobB := submitAs(t, addr, ca, bToken, ref, dist)
		create("foreign", map[string]any{"jobID": jobB})
		st := status("foreign", func(st map[string]any) bool { return condition(st, "ControllerReachable", "False") == "JobNotFound" })
		if st["phase"] != "Pending" {
			t.Fatalf("status %v", st)
		}
		if !hasEvent(t, "foreign", "JobNotFound") {
			t.Fatal("no JobNotFound event")
		}
	})

	t.Run("an expired token file is shown as that file and expiry; a restarted refresher finishes the job", func(t *testing.T) {
		if err := opRefresher.Stop(); err != nil {
			t.Logf("refresher exit: %v", err)
		}
		time.Sleep(13 * time.Second) // the last token (12 s) expires
		create("stalled", map[string]any{"reference": ref, "distorted": dist, "metrics": []any{"psnr"}})
		st := status("stalled", func(st map[string]any) bool { return condition(st, "ControllerReachable", "False") == "TokenExpired" })
		msg := conditionMessage(st, "ControllerReachable")
		if !strings.Contains(msg, opToken) || !strings.Contains(msg, "expired at") {
			t.Fatalf("condition message %q does not name the file and the expiry", msg)
		}
		startOpRefresher()
		status("stalled", phase("Succeeded"))
	})
	// Everything it did, it did with the chart's permissions: nothing was
	// forbidden. What the chart grants and the operator never used is
	// listed: each is justified in the chart's comments or dropped.
	if out := op.Output(); strings.Contains(out, "forbidden") {
		t.Errorf("the operator, as the chart's ServiceAccount, was refused something:\n%s", out)
	}
	reqs, err := apiserver.Requests("system:serviceaccount:vmafx-system:vmafx-operator")
	if err != nil || len(reqs) == 0 {
		t.Fatalf("the audit log of the operator's requests: %d, %v", len(reqs), err)
	}
	unused := charts.Unused(opRBAC, reqs)

	t.Logf("the operator made %d requests; granted by the chart and not used in this run: %v", len(reqs), unused)
	// controller-runtime's families beside the process's, none twice.
	if code, body := httpGet(opMetrics + "/metrics"); code != http.StatusOK || !strings.Contains(body, "controller_runtime_reconcile_total") ||
		strings.Count(body, "# TYPE go_goroutines ") != 1 {
		t.Fatalf("the operator's /metrics: %d, controller-runtime's families %v, go_goroutines %d times", code,
			strings.Contains(body, "controller_runtime_reconcile_total"), strings.Count(body, "# TYPE go_goroutines "))
	}
}

// chartOperatorToken applies the vmafx chart's operator account and RBAC
// (rendered into vmafx-system, server-side apply, strict validation) and
// returns a token for that account.
func chartOperatorToken(ctx context.Context, t *testing.T) (string, []*unstructured.Unstructured) {
	t.Helper()
	out, err := charts.Render("../../deploy/charts/vmafx", "vmafx", "vmafx-system",
		"tenants:\n  - {name: tenant-a, issuer: 'https://idp.tenant-a.example/', audiences: [vmafx-controller]}\ncredentials: {tenant: tenant-a}\n")
	if err != nil {
		t.Fatal(err)
	}
	var rbac []*unstructured.Unstructured
	for _, o := range charts.Objects(t, out["vmafx/templates/operator.yaml"]) {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	if len(rbac) != 5 {
		t.Fatalf("the chart's operator.yaml has %d account and RBAC objects; want 5", len(rbac))
	}
	for _, err := range charts.NewCluster(t, apiserver.REST).Apply(ctx, "vmafx-system", rbac) {
		t.Fatal(err)
	}
	tok, err := apiserver.Token(ctx, "vmafx-system", "vmafx-operator", nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok, rbac
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was never written", path)
		}
	}
}

// submitAs submits a job with the token in tokenFile, as a tenant's CLI.
func submitAs(t *testing.T, addr string, ca *pki.CA, tokenFile, ref, dist string) string {
	t.Helper()
	cfg := credentials.Config{Address: addr, TLS: true, ServerName: "127.0.0.1", TokenFile: tokenFile}
	caFile, err := ca.WriteCA(filepath.Join(t.TempDir(), "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.CAFile = caFile
	conn, err := cfg.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := vmafxv1.NewJobServiceClient(conn).SubmitJob(context.Background(), &vmafxv1.SubmitJobRequest{
		Spec: &vmafxv1.JobSpec{Reference: ref, Distorted: dist, Metrics: []string{"psnr"}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetJob().GetId()
}

// condition is the reason of the condition of type typ with status want,
// "" when there is none.
func condition(st map[string]any, typ, want string) string {
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == want {
			r, _ := m["reason"].(string)
			return r
		}
	}
	return ""
}

func conditionMessage(st map[string]any, typ string) string {
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			msg, _ := m["message"].(string)
			return msg
		}
	}
	return ""
}

// hasEvent reports an event about the VmafxJob with the reason.
func hasEvent(t *testing.T, name, reason string) bool {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		list, err := apiserver.Client.EventsV1().Events("team-a").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				return true
			}
		}
	}
	return false
}

// httpGet is the status and body of a GET.
func httpGet(url string) (int, string) {
	resp, err := http.Get(url) //nolint:noctx // a loopback test URL
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
