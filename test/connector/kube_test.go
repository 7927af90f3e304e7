package connector_test

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"google.golang.org/grpc/codes"
)

// TestSocketRoleKubeAPIServer runs the socket role against a real
// kube-apiserver, with tokens minted by TokenRequest bound to pods on named
// nodes.
func TestSocketRoleKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	s := apiserver
	const ns = "nvsentinel"
	if err := s.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"gpu-health-monitor", "csp-health-monitor"} {
		if _, err := s.ServiceAccount(ctx, ns, sa); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{localNode, "node-b"} {
		if _, err := s.Node(ctx, n); err != nil {
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
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, configJSON([]string{monitor}, "enforce", false), []string{"NODE_NAME=" + localNode}, "--kubeconfig", kubeconfig)

	agent := token("gpu-health-monitor", pod("gpu-mon-a", "gpu-health-monitor", localNode))
	check(t, "own-node agent, blank stamped", send(t, p, agent, ""),
		outcome{code: codes.OK, stored: []string{localNode}, moved: "decisions_total{node_local}+1 node_claim_total{verified}+1"})
	check(t, "own-node agent names another node", send(t, p, agent, "node-b"),
		outcome{code: codes.PermissionDenied, reason: "node_mismatch", moved: "node_claim_total{verified}+1 violations_total{node_mismatch}+1"})
	check(t, "a token issued on node-b presented to node-a", send(t, p, token("gpu-health-monitor", pod("gpu-mon-b", "gpu-health-monitor", "node-b")), ""),
		outcome{code: codes.PermissionDenied, reason: "node_claim_mismatch", moved: "node_claim_total{verified}+1 violations_total{node_claim_mismatch}+1"})
	check(t, "allowlisted monitor bound to a pod on this node names other nodes", send(t, p, token("csp-health-monitor", pod("csp-0", "csp-health-monitor", localNode)), "node-b"),
		outcome{code: codes.OK, stored: []string{"node-b"}, moved: "decisions_total{cross_node}+1 node_claim_total{verified}+1"})
	check(t, "allowlisted monitor without a bound pod (kubectl create token)", send(t, p, token("csp-health-monitor", nil), localNode),
		outcome{code: codes.PermissionDenied, reason: "unbound_cross_node_token", moved: "node_claim_total{absent}+1 violations_total{unbound_cross_node_token}+1"})
	check(t, "allowlisted monitor whose pod was never scheduled", send(t, p, token("csp-health-monitor", pod("csp-pending", "csp-health-monitor", "")), "node-b"),
		outcome{code: codes.PermissionDenied, reason: "cross_node_claim_absent", moved: "node_claim_total{absent}+1 violations_total{cross_node_claim_absent}+1"})
}
