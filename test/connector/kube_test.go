package connector_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/charts"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"google.golang.org/grpc/codes"
)

// TestSocketRoleKubeAPIServer runs the socket role against a real
// kube-apiserver, with tokens minted by TokenRequest bound to pods on named
// nodes.
func TestSocketRoleKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	s := apiserver
	// A namespace of its own per run: without a controller-manager, deleted
	// namespaces are never cleaned up.
	ns := fmt.Sprintf("nvsentinel-%d", time.Now().UnixNano()%1e9)
	crossNode := []string{"system:serviceaccount:" + ns + ":csp-health-monitor"}
	if err := s.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"gpu-health-monitor", "csp-health-monitor"} {
		if _, err := s.ServiceAccount(ctx, ns, sa); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{localNode, "node-b"} {
		if _, err := s.Node(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	pod := func(name, sa, node string) *corev1.Pod {
		p, err := s.Pod(ctx, ns, name, sa, node)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := func(sa string, p *corev1.Pod) string {
		tok, err := s.Token(ctx, ns, sa, []string{aud}, 3600, p)
		if err != nil {
			t.Fatal(err)
		}
		return writeToken(t, tok)
	}
	// The connector runs as the chart's ServiceAccount, with the chart's
	// RBAC (rbac.yaml: the account, the TokenReview binding, the
	// bound-object ClusterRole) applied and nothing else.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	saToken, rbac := chartConnectorToken(ctx, t, ns)
	if err := s.WriteKubeconfigAs(kubeconfig, saToken); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"enforce", "audit"} {
		t.Run(mode, func(t *testing.T) { kubeSocketRole(t, mode, kubeconfig, crossNode, pod, token) })
	}
	// The chart's opt-in for the socket role (daemonset.watchBoundObjects):
	// tokens verified offline, the pods of this node and the service
	// accounts watched.
	t.Run("enforce, bound-object watch", func(t *testing.T) {
		kubeSocketRole(t, "enforce", kubeconfig, crossNode, pod, token, "--caller-watch-bound-objects")
	})
	t.Run("deployment", func(t *testing.T) { kubeDeploymentRole(t, kubeconfig, crossNode, pod, token) })

	// What the chart grants and the connector never used (the audit log of
	// its requests) must be justified in rbac.yaml.
	reqs, err := s.Requests("system:serviceaccount:" + ns + ":pc-platform-connector")
	if err != nil || len(reqs) == 0 {
		t.Fatalf("the audit log of the connector's requests: %d, %v", len(reqs), err)
	}
	unused := charts.Unused(rbac, reqs)
	t.Logf("the connector made %d requests; granted by the chart and not used: %v", len(reqs), unused)
	for _, u := range unused {
		if u != "list /pods" && u != "list /serviceaccounts" { // the initial list where the API server does not stream it in the watch
			t.Errorf("the chart grants %q, which the connector never used and rbac.yaml does not justify: least privilege", u)
		}
	}
}

// chartConnectorToken applies the platform-connector chart's account and
// RBAC, rendered into ns (server-side apply, strict validation), and
// returns a token the API server issues for that account.
func chartConnectorToken(ctx context.Context, t *testing.T, ns string) (string, []*unstructured.Unstructured) {
	t.Helper()
	out, err := charts.Render("../../deploy/charts/platform-connector", "pc", ns, "global:\n  platformConnectorAuth:\n    enabled: true\ndaemonset: {watchBoundObjects: true}\ndeployment: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	rbac := charts.Objects(t, out["platform-connector/templates/rbac.yaml"])
	if len(rbac) < 3 {
		t.Fatalf("the chart's rbac.yaml has %d objects", len(rbac))
	}
	for _, err := range charts.NewCluster(t, apiserver.REST).Apply(ctx, ns, rbac) {
		t.Fatal(err)
	}
	tok, err := apiserver.Token(ctx, ns, "pc-platform-connector", nil, 3600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok, rbac
}

func kubeSocketRole(t *testing.T, mode, kubeconfig string, crossNode []string, pod func(name, sa, node string) *corev1.Pod, token func(sa string, p *corev1.Pod) string, extra ...string) {
	p := startProc(t, configJSON(crossNode, mode, false), []string{"NODE_NAME=" + localNode}, append([]string{"--kubeconfig", kubeconfig}, extra...)...)
	suffix := mode
	if len(extra) > 0 {
		suffix += "-w"
	}
	audit := mode == "audit"
	refuse := func(reason, claim string, wouldStore ...string) outcome {
		if audit {
			return outcome{code: codes.OK, stored: wouldStore, moved: "decisions_total{node_local}+1 node_claim_total{" + claim + "}+1 violations_total{" + reason + "}+1"}
		}
		return outcome{code: codes.PermissionDenied, reason: reason, moved: "node_claim_total{" + claim + "}+1 violations_total{" + reason + "}+1"}
	}

	agent := token("gpu-health-monitor", pod("gpu-mon-a-"+suffix, "gpu-health-monitor", localNode))
	check(t, "own-node agent, blank stamped", send(t, p, agent, ""),
		outcome{code: codes.OK, stored: []string{localNode}, moved: "decisions_total{node_local}+1 node_claim_total{verified}+1"})
	check(t, "own-node agent names another node", send(t, p, agent, "node-b"), refuse("node_mismatch", "verified", "node-b"))
	check(t, "a token issued on node-b presented to node-a", send(t, p, token("gpu-health-monitor", pod("gpu-mon-b-"+suffix, "gpu-health-monitor", "node-b")), ""),
		refuse("node_claim_mismatch", "verified", localNode))
	check(t, "allowlisted monitor bound to a pod on this node names other nodes", send(t, p, token("csp-health-monitor", pod("csp-0-"+suffix, "csp-health-monitor", localNode)), "node-b"),
		outcome{code: codes.OK, stored: []string{"node-b"}, moved: "decisions_total{cross_node}+1 node_claim_total{verified}+1"})
	check(t, "allowlisted monitor without a bound pod (kubectl create token)", send(t, p, token("csp-health-monitor", nil), localNode),
		refuse("unbound_cross_node_token", "absent", localNode))
	check(t, "allowlisted monitor whose pod was never scheduled", send(t, p, token("csp-health-monitor", pod("csp-pending-"+suffix, "csp-health-monitor", "")), "node-b"),
		refuse("cross_node_claim_absent", "absent", "node-b"))
	noRefusal(t, p)
}

// noRefusal fails the test if the connector, running as the chart's
// ServiceAccount, was refused anything by the API server.
func noRefusal(t *testing.T, p *proc) {
	t.Helper()
	if out := p.Output(); strings.Contains(out, "forbidden") {
		t.Errorf("the connector, as the chart's ServiceAccount, was refused something:\n%s", out)
	}
}

func kubeDeploymentRole(t *testing.T, kubeconfig string, crossNode []string, pod func(name, sa, node string) *corev1.Pod, token func(sa string, p *corev1.Pod) string) {
	p, caFile := startDeployment(t, configJSON(crossNode, "enforce", false), kubeconfig)
	check(t, "deployment: no token", sendTLS(t, p, caFile, "", "node-b"),
		outcome{code: codes.Unauthenticated, reason: "token_missing", moved: "violations_total{token_missing}+1"})
	check(t, "deployment: a token bound to no pod", sendTLS(t, p, caFile, token("gpu-health-monitor", nil), "node-b"),
		outcome{code: codes.PermissionDenied, reason: "unbound_token", moved: "node_claim_total{absent}+1 violations_total{unbound_token}+1"})
	check(t, "deployment: a pod never scheduled", sendTLS(t, p, caFile, token("gpu-health-monitor", pod("gpu-pending-d", "gpu-health-monitor", "")), ""),
		outcome{code: codes.PermissionDenied, reason: "node_claim_absent", moved: "node_claim_total{absent}+1 violations_total{node_claim_absent}+1"})
	onB := token("gpu-health-monitor", pod("gpu-on-b-d", "gpu-health-monitor", "node-b"))
	check(t, "deployment: the token's node is the node it reports on", sendTLS(t, p, caFile, onB, "", "node-b"),
		outcome{code: codes.OK, stored: []string{"node-b", "node-b"}, moved: "decisions_total{node_local}+1 node_claim_total{verified}+1"})
	check(t, "deployment: another node", sendTLS(t, p, caFile, onB, localNode),
		outcome{code: codes.PermissionDenied, reason: "node_mismatch", moved: "node_claim_total{verified}+1 violations_total{node_mismatch}+1"})
	noRefusal(t, p)
}
