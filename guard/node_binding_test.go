package guard_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
)

const (
	localNode = "node-a"
	monitorSA = "system:serviceaccount:nvsentinel:csp-health-monitor"
	agentSA   = "system:serviceaccount:nvsentinel:gpu-health-monitor"
)

// The node-binding callers (the platform-connector's), by the token they present.
var nodeBindingCallers = map[string]*authn.Caller{
	"agent-unbound":          {Username: agentSA},
	"agent-on-local-node":    {Username: agentSA, PodName: "gpu-mon-a", PodUID: "pa", NodeName: localNode, NodeUID: "na"},
	"agent-on-other-node":    {Username: agentSA, PodName: "gpu-mon-b", PodUID: "pb", NodeName: "node-b", NodeUID: "nb"},
	"agent-pod-unscheduled":  {Username: agentSA, PodName: "gpu-mon-p", PodUID: "pp"},
	"monitor-bound":          {Username: monitorSA, PodName: "csp-0", PodUID: "pc", NodeName: localNode, NodeUID: "na"},
	"monitor-on-other-node":  {Username: monitorSA, PodName: "csp-1", PodUID: "pd", NodeName: "node-b", NodeUID: "nb"},
	"monitor-unbound":        {Username: monitorSA},
	"monitor-pod-unschedule": {Username: monitorSA, PodName: "csp-2", PodUID: "pe"},
}

// want is what the caller observes in one mode.
type want struct {
	code    string
	handler bool
	nodes   []string // as stamped, when the handler ran
}

var (
	ok = func(nodes ...string) want { return want{code: "OK", handler: true, nodes: nodes} }
	no = func(code string) want { return want{code: code} }
)

type failOpen int

const (
	either failOpen = iota // the row holds with failOpenOnUnavailable on and off
	off
	on
)

// row is one sentence of the platform-connector's node-binding specification, checked in enforce and audit.
type row struct {
	sentence  string
	role      string // "socket" (local node node-a) or "deployment"
	header    []string
	nodes     []string
	failOpen  failOpen
	enforce   want
	audit     want
	violation string // the reason counted, in both modes ("" none)
	claim     string // node claim counted: verified, absent, ""
	scope     string // scope counted when the handler runs
}

var nodeBindingRows = []row{
	// The per-caller rule, question 1.
	{sentence: "a token carrying a node claim must name this connector's own node (not allowlisted)", role: "socket",
		header: bearerOf("agent-on-other-node"), nodes: []string{""},
		enforce: no("PermissionDenied"), audit: ok(localNode), violation: "node_claim_mismatch", claim: "verified", scope: "node_local"},
	{sentence: "a token carrying a node claim must name this connector's own node — for every caller, allowlisted or not", role: "socket",
		header: bearerOf("monitor-on-other-node"), nodes: []string{"node-c"},
		enforce: no("PermissionDenied"), audit: ok("node-c"), violation: "node_claim_mismatch", claim: "verified", scope: "node_local"},
	// Question 2.
	{sentence: "may this identity name other nodes? Otherwise it is pinned: an event naming another node is node_mismatch", role: "socket",
		header: bearerOf("agent-on-local-node"), nodes: []string{localNode, "node-b"},
		enforce: no("PermissionDenied"), audit: ok(localNode, "node-b"), violation: "node_mismatch", claim: "verified", scope: "node_local"},
	{sentence: "a pinned caller without a node claim naming another node is node_mismatch", role: "socket",
		header: bearerOf("agent-unbound"), nodes: []string{"node-b"},
		enforce: no("PermissionDenied"), audit: ok("node-b"), violation: "node_mismatch", claim: "absent", scope: "node_local"},
	{sentence: "most publishers leave the node name blank for platform-connector to fill in (stamped with this node)", role: "socket",
		header: bearerOf("agent-on-local-node"), nodes: []string{"", localNode},
		enforce: ok(localNode, localNode), audit: ok(localNode, localNode), claim: "verified", scope: "node_local"},
	{sentence: "a pinned caller without a node claim: blank stamped, own node accepted", role: "socket",
		header: bearerOf("agent-unbound"), nodes: []string{"", localNode},
		enforce: ok(localNode, localNode), audit: ok(localNode, localNode), claim: "absent", scope: "node_local"},
	// The allowlisted caller.
	{sentence: "only an allowlisted identity may name other nodes", role: "socket",
		header: bearerOf("monitor-bound"), nodes: []string{"node-b", "node-c", localNode},
		enforce: ok("node-b", "node-c", localNode), audit: ok("node-b", "node-c", localNode), claim: "verified", scope: "cross_node"},
	{sentence: "an allowlisted caller must present a token bound to a pod (unbound_cross_node_token)", role: "socket",
		header: bearerOf("monitor-unbound"), nodes: []string{"node-b"},
		enforce: no("PermissionDenied"), audit: ok("node-b"), violation: "unbound_cross_node_token", claim: "absent", scope: "node_local"},
	{sentence: "a token with neither claim is refused for own-node events too, not merely downgraded", role: "socket",
		header: bearerOf("monitor-unbound"), nodes: []string{localNode, ""},
		enforce: no("PermissionDenied"), audit: ok(localNode, localNode), violation: "unbound_cross_node_token", claim: "absent", scope: "node_local"},
	{sentence: "pod-bound, but the pod was never scheduled (cross_node_claim_absent)", role: "socket",
		header: bearerOf("monitor-pod-unschedule"), nodes: []string{"node-b"},
		enforce: no("PermissionDenied"), audit: ok("node-b"), violation: "cross_node_claim_absent", claim: "absent", scope: "node_local"},
	{sentence: "cross_node_claim_absent holds for own-node events too", role: "socket",
		header: bearerOf("monitor-pod-unschedule"), nodes: []string{localNode},
		enforce: no("PermissionDenied"), audit: ok(localNode), violation: "cross_node_claim_absent", claim: "absent", scope: "node_local"},
	// Tokenless callers.
	{sentence: "callers presenting no token are accepted and pinned to the connector's node", role: "socket",
		header: nil, nodes: []string{"", localNode},
		enforce: ok(localNode, localNode), audit: ok(localNode, localNode), scope: "node_local"},
	{sentence: "a tokenless caller is pinned: another node is node_mismatch", role: "socket",
		header: nil, nodes: []string{"node-b"},
		enforce: no("PermissionDenied"), audit: ok("node-b"), violation: "node_mismatch", scope: "node_local"},
	// missing_node_name.
	{sentence: "an event with no node name from a verified cross-node caller is always rejected, in both audit and enforce", role: "socket",
		header: bearerOf("monitor-bound"), nodes: []string{"node-b", ""},
		enforce: no("PermissionDenied"), audit: no("PermissionDenied"), violation: "missing_node_name", claim: "verified"},
	// Credentials.
	{sentence: "the authorization header was duplicated (malformed_credentials)", role: "socket",
		header: []string{"Bearer agent-on-local-node", "Bearer agent-on-local-node"}, nodes: []string{""},
		enforce: no("Unauthenticated"), audit: ok(localNode), violation: "malformed_credentials", scope: "node_local"},
	{sentence: "or did not use the Bearer scheme (malformed_credentials)", role: "socket",
		header: []string{"Basic dXNlcjpwYXNz"}, nodes: []string{""},
		enforce: no("Unauthenticated"), audit: ok(localNode), violation: "malformed_credentials", scope: "node_local"},
	// mode and failOpenOnUnavailable.
	{sentence: "token_invalid says something about the caller and is always rejected under enforce, regardless of failOpenOnUnavailable", role: "socket",
		header: bearerOf("invalid"), nodes: []string{""},
		enforce: no("Unauthenticated"), audit: ok(localNode), violation: "token_invalid", scope: "node_local"},
	{sentence: "defaults to false: an unreachable validator rejects the request; audit records it and lets it through", role: "socket",
		header: bearerOf("unavailable"), nodes: []string{""}, failOpen: off,
		enforce: no("Unavailable"), audit: ok(localNode), violation: "validator_unavailable", scope: "node_local"},
	{sentence: "a validator timeout rejects without fail-open; audit records it and lets it through", role: "socket",
		header: bearerOf("timeout"), nodes: []string{"node-b"}, failOpen: off,
		enforce: no("Unavailable"), audit: ok("node-b"), violation: "validator_timeout", scope: "node_local"},
	{sentence: "fail-open: an event with a blank or matching node name is accepted and stamped as a verified node-local caller's, in either mode", role: "socket",
		header: bearerOf("unavailable"), nodes: []string{"", localNode}, failOpen: on,
		enforce: ok(localNode, localNode), audit: ok(localNode, localNode), violation: "validator_unavailable", scope: "node_local"},
	{sentence: "fail-open: a degraded caller's blank name is stamped, not missing_node_name (timeout)", role: "socket",
		header: bearerOf("timeout"), nodes: []string{""}, failOpen: on,
		enforce: ok(localNode), audit: ok(localNode), violation: "validator_timeout", scope: "node_local"},
	{sentence: "fail-open: an event naming a different node is refused under enforce as retryable Unavailable, not node_mismatch; under audit it is forwarded with the node it carried", role: "socket",
		header: bearerOf("unavailable"), nodes: []string{"node-b"}, failOpen: on,
		enforce: no("Unavailable"), audit: ok("node-b"), violation: "validator_unavailable", scope: "node_local"},
	{sentence: "fail-open covers validator_timeout as validator_unavailable", role: "socket",
		header: bearerOf("timeout"), nodes: []string{"node-b", ""}, failOpen: on,
		enforce: no("Unavailable"), audit: ok("node-b", localNode), violation: "validator_timeout", scope: "node_local"},
	{sentence: "validator_error (no identity returned) never fails open", role: "socket",
		header: bearerOf("error"), nodes: []string{""},
		enforce: no("Unavailable"), audit: ok(localNode), violation: "validator_error", scope: "node_local"},
	// Deployment platform connector.
	{sentence: "deployment: every caller must present a token (token_missing)", role: "deployment",
		header: nil, nodes: []string{"node-b"},
		enforce: no("Unauthenticated"), audit: ok("node-b"), violation: "token_missing"},
	{sentence: "deployment: the token must be bound to a pod (unbound_token)", role: "deployment",
		header: bearerOf("agent-unbound"), nodes: []string{"node-b"},
		enforce: no("PermissionDenied"), audit: ok("node-b"), violation: "unbound_token", claim: "absent"},
	{sentence: "deployment: an allowlisted caller's token must be bound to a pod too", role: "deployment",
		header: bearerOf("monitor-unbound"), nodes: []string{"node-b"},
		enforce: no("PermissionDenied"), audit: ok("node-b"), violation: "unbound_token", claim: "absent"},
	{sentence: "deployment: a pod that never scheduled leaves no node to pin its events to (node_claim_absent)", role: "deployment",
		header: bearerOf("agent-pod-unscheduled"), nodes: []string{""},
		enforce: no("PermissionDenied"), audit: ok(""), violation: "node_claim_absent", claim: "absent"},
	{sentence: "deployment: the node named in the token is the node the caller may report on (blank stamped with it)", role: "deployment",
		header: bearerOf("agent-on-other-node"), nodes: []string{"node-b", ""},
		enforce: ok("node-b", "node-b"), audit: ok("node-b", "node-b"), claim: "verified", scope: "node_local"},
	{sentence: "deployment: a caller naming a node other than its token's is node_mismatch", role: "deployment",
		header: bearerOf("agent-on-other-node"), nodes: []string{localNode},
		enforce: no("PermissionDenied"), audit: ok(localNode), violation: "node_mismatch", claim: "verified", scope: "node_local"},
	{sentence: "deployment: the cross-node list is the only way to name other nodes", role: "deployment",
		header: bearerOf("monitor-bound"), nodes: []string{"node-b", "node-c"},
		enforce: ok("node-b", "node-c"), audit: ok("node-b", "node-c"), claim: "verified", scope: "cross_node"},
	{sentence: "deployment: with no node to fall back on, fail-open grants nothing", role: "deployment",
		header: bearerOf("unavailable"), nodes: []string{""}, failOpen: on,
		enforce: no("Unavailable"), audit: ok(""), violation: "validator_unavailable"},
}

// TestNodeBinding runs every row through the gRPC interceptor over TLS on
// loopback and over a Unix socket, and through the HTTP middleware, in
// enforce and audit, with failOpenOnUnavailable on and off.
func TestNodeBinding(t *testing.T) {
	transports := []struct {
		name  string
		start func(*testing.T, *guard.Guard) transport
	}{
		{"grpc-tls", func(t *testing.T, g *guard.Guard) transport { return startGRPC(t, g, false) }},
		{"grpc-unix", func(t *testing.T, g *guard.Guard) transport { return startGRPC(t, g, true) }},
		{"http", func(t *testing.T, g *guard.Guard) transport { return startHTTP(t, g) }},
	}
	for _, tr := range transports {
		for _, role := range []string{"socket", "deployment"} {
			for _, mode := range []guard.Mode{guard.Enforce, guard.Audit} {
				for _, fo := range []bool{false, true} {
					name := fmt.Sprintf("%s/%s/%s/failOpen=%t", tr.name, role, mode, fo)
					t.Run(name, func(t *testing.T) {
						local := localNode
						if role == "deployment" {
							local = ""
						}
						g, reg := newNodeGuard(t, guard.Config{
							Mode: mode, FailOpenOnUnavailable: fo,
							Authenticator: fakeAuth(nodeBindingCallers),
						}, binding.NodeConfig{LocalNode: local, CrossNode: []string{monitorSA}})
						send := tr.start(t, g)
						for _, r := range nodeBindingRows {
							if r.role != role || (r.failOpen == on && !fo) || (r.failOpen == off && fo) {
								continue
							}
							checkRow(t, send, reg, r, mode)
						}
					})
				}
			}
		}
	}
}

func checkRow(t *testing.T, send transport, reg *prometheus.Registry, r row, mode guard.Mode) {
	t.Helper()
	w := r.enforce
	if mode == guard.Audit {
		w = r.audit
	}
	before := counters(t, reg)
	got := send.send(t, r.header, r.nodes)
	after := counters(t, reg)
	prefix := r.sentence + ": "
	if got.code != w.code || got.handler != w.handler {
		t.Errorf("%scode %s handler %v; want %s handler %v (reason %q)", prefix, got.code, got.handler, w.code, w.handler, got.reason)
		return
	}
	if w.handler && !slices.Equal(got.nodes, w.nodes) {
		t.Errorf("%sstamped %q; want %q", prefix, got.nodes, w.nodes)
	}
	if !w.handler && r.violation != "" && got.reason != r.violation {
		t.Errorf("%sreason %q; want %q", prefix, got.reason, r.violation)
	}
	wantDeltas := map[string]float64{}
	if r.violation != "" {
		wantDeltas["platform_connector_auth_violations_total{"+r.violation+"}"] = 1
	}
	if r.claim != "" {
		wantDeltas["platform_connector_auth_node_claim_total{"+r.claim+"}"] = 1
	}
	if w.handler && r.scope != "" {
		wantDeltas["platform_connector_auth_decisions_total{"+r.scope+"}"] = 1
	}
	if d := deltas(before, after); fmt.Sprint(d) != fmt.Sprint(wantDeltas) {
		t.Errorf("%scounter deltas %v; want %v", prefix, d, wantDeltas)
	}
}
