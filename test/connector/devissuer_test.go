package connector_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
)

const (
	aud       = "platform-connector.nvsentinel.nvidia.com"
	localNode = "node-a"
	monitor   = "system:serviceaccount:nvsentinel:csp-health-monitor"
)

type dev struct {
	iss  *devissuer.Issuer
	srv  *devissuer.Server
	addr string
}

func startDev(t *testing.T) *dev {
	t.Helper()
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	d := &dev{iss: iss, srv: srv, addr: strings.TrimPrefix(srv.URL, "https://")}
	t.Cleanup(func() { _ = d.srv.Close() })
	return d
}

// token mints a token file for a publisher.
func (d *dev) token(t *testing.T, sa, pod, node, audience string) string {
	t.Helper()
	tok, err := d.iss.Mint(devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: sa, Audiences: []string{audience}, Pod: pod, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return writeToken(t, tok.Token)
}

type outcome struct {
	code   codes.Code
	reason string
	stored []string // node names stored by this batch, in order
	moved  string   // metric deltas
}

func send(t *testing.T, p *proc, tokenFile string, nodes ...string) outcome {
	t.Helper()
	before, n := p.metricsNow(t), len(p.stored(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.publisher(t, tokenFile).Publish(ctx, events(nodes...)...)
	st := status.Convert(err)
	o := outcome{code: st.Code(), moved: deltas(before, p.metricsNow(t))}
	if err != nil {
		o.reason = st.Message()
	}
	for _, e := range p.stored(t)[n:] {
		o.stored = append(o.stored, e.Node)
	}
	return o
}

func check(t *testing.T, name string, got, want outcome) {
	t.Helper()
	if got.code != want.code || got.reason != want.reason || fmt.Sprint(got.stored) != fmt.Sprint(want.stored) || got.moved != want.moved {
		t.Errorf("%s:\n got %s %q stored %q counted [%s]\nwant %s %q stored %q counted [%s]", name,
			got.code, got.reason, got.stored, got.moved, want.code, want.reason, want.stored, want.moved)
	}
}

// TestSocketRoleDevIssuer runs the node-binding rules through the real binary in
// the socket role, in enforce and audit.
func TestSocketRoleDevIssuer(t *testing.T) {
	d := startDev(t)
	for _, mode := range []string{"enforce", "audit"} {
		t.Run(mode, func(t *testing.T) {
			p := startProc(t, configJSON([]string{monitor}, mode, false), []string{"NODE_NAME=" + localNode},
				"--kubeconfig", d.iss.KubeconfigFile())
			audit := mode == "audit"
			agent := d.token(t, "gpu-health-monitor", "gpu-mon-"+mode, localNode, aud)
			check(t, "own node, blank name stamped", send(t, p, agent, "", localNode),
				outcome{code: codes.OK, stored: []string{localNode, localNode}, moved: "decisions_total{node_local}+1 node_claim_total{verified}+1"})
			refused := outcome{code: codes.PermissionDenied, reason: "node_mismatch", moved: "node_claim_total{verified}+1 violations_total{node_mismatch}+1"}
			if audit {
				refused = outcome{code: codes.OK, stored: []string{"node-b"}, moved: "decisions_total{node_local}+1 node_claim_total{verified}+1 violations_total{node_mismatch}+1"}
			}
			check(t, "another node", send(t, p, agent, "node-b"), refused)
			mon := d.token(t, "csp-health-monitor", "csp-"+mode, localNode, aud)
			check(t, "allowlisted pod-bound monitor names other nodes", send(t, p, mon, "node-b", "node-c"),
				outcome{code: codes.OK, stored: []string{"node-b", "node-c"}, moved: "decisions_total{cross_node}+1 node_claim_total{verified}+1"})
			check(t, "a cross-node blank name is missing_node_name in every mode", send(t, p, mon, "node-b", ""),
				outcome{code: codes.PermissionDenied, reason: "missing_node_name", moved: "node_claim_total{verified}+1 violations_total{missing_node_name}+1"})
			check(t, "no token: pinned to this node", send(t, p, "", ""),
				outcome{code: codes.OK, stored: []string{localNode}, moved: "decisions_total{node_local}+1"})
			unbound := d.token(t, "csp-health-monitor", "", "", aud)
			want := outcome{code: codes.PermissionDenied, reason: "unbound_cross_node_token", moved: "node_claim_total{absent}+1 violations_total{unbound_cross_node_token}+1"}
			if audit {
				want = outcome{code: codes.OK, stored: []string{localNode}, moved: "decisions_total{node_local}+1 node_claim_total{absent}+1 violations_total{unbound_cross_node_token}+1"}
			}
			check(t, "allowlisted but bound to no pod, own node", send(t, p, unbound, localNode), want)
			other := d.token(t, "gpu-health-monitor", "gpu-mon-b-"+mode, "node-b", aud)
			want = outcome{code: codes.PermissionDenied, reason: "node_claim_mismatch", moved: "node_claim_total{verified}+1 violations_total{node_claim_mismatch}+1"}
			if audit {
				want = outcome{code: codes.OK, stored: []string{localNode}, moved: "decisions_total{node_local}+1 node_claim_total{verified}+1 violations_total{node_claim_mismatch}+1"}
			}
			check(t, "a token issued on another node", send(t, p, other, ""), want)
			wrongAud := d.token(t, "gpu-health-monitor", "gpu-mon-w-"+mode, localNode, "flex-auth")
			want = outcome{code: codes.Unauthenticated, reason: "token_invalid", moved: "violations_total{token_invalid}+1"}
			if audit {
				want = outcome{code: codes.OK, stored: []string{localNode}, moved: "decisions_total{node_local}+1 violations_total{token_invalid}+1"}
			}
			check(t, "a token for another audience", send(t, p, wrongAud, ""), want)
		})
	}
}

// TestFailOpenMidRun stops the validator while the connector runs: without
// fail-open the publisher is told Unavailable; with it, a blank event is
// stamped degraded and another node is Unavailable; a publisher that
// retries delivers every event once the validator is back, none twice.
func TestFailOpenMidRun(t *testing.T) {
	for _, mode := range []string{"enforce", "audit"} {
		for _, failOpen := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failOpen=%t", mode, failOpen), func(t *testing.T) { failOpenMidRun(t, mode, failOpen) })
		}
	}
}

func failOpenMidRun(t *testing.T, mode string, failOpen bool) {
	audit := mode == "audit"
	d := startDev(t)
	p := startProc(t, configJSON([]string{monitor}, mode, failOpen), []string{"NODE_NAME=" + localNode},
		"--kubeconfig", d.iss.KubeconfigFile(), "--caller-review-timeout", "2s")
	warm := d.token(t, "gpu-health-monitor", "gpu-warm", localNode, aud)
	check(t, "before the outage", send(t, p, warm, ""), outcome{code: codes.OK, stored: []string{localNode},
		moved: "decisions_total{node_local}+1 node_claim_total{verified}+1"})

	_ = d.srv.Close() // the validator goes away
	fresh := d.token(t, "gpu-health-monitor", "gpu-fresh", localNode, aud)
	// Unavailable under enforce without fail-open; otherwise stored, degraded
	// or audited, and counted either way.
	blank := outcome{code: codes.OK, stored: []string{localNode}, moved: "decisions_total{node_local}+1 violations_total{validator_unavailable}+1"}
	if !audit && !failOpen {
		blank = outcome{code: codes.Unavailable, reason: "validator_unavailable", moved: "violations_total{validator_unavailable}+1"}
	}
	check(t, "validator down, blank name", send(t, p, fresh, ""), blank)
	other := outcome{code: codes.Unavailable, reason: "validator_unavailable", moved: "violations_total{validator_unavailable}+1"}
	if audit {
		// "that same Unavailable is what gets recorded and then let through"
		other = outcome{code: codes.OK, stored: []string{"node-b"}, moved: "decisions_total{node_local}+1 violations_total{validator_unavailable}+1"}
	}
	check(t, "validator down, another node: Unavailable, never node_mismatch", send(t, p, d.token(t, "csp-health-monitor", "csp-x", localNode, aud), "node-b"), other)
	check(t, "the verdict cached before the outage still serves", send(t, p, warm, localNode), outcome{code: codes.OK, stored: []string{localNode},
		moved: "decisions_total{node_local}+1 node_claim_total{verified}+1"})

	// A retrying publisher, started during the outage.
	mon := d.token(t, "csp-health-monitor", "csp-retry", localNode, aud)
	n := len(p.stored(t))
	var wg sync.WaitGroup
	var err error
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pub := p.publisher(t, mon)
		pub.Backoff = 100 * time.Millisecond
		err = pub.PublishRetrying(ctx, events("node-b", "node-c")...)
	})
	time.Sleep(time.Second)
	srv, serr := d.iss.Serve(d.addr, nil) // the validator is back, same address
	if serr != nil {
		t.Fatal(serr)
	}
	d.srv = srv
	wg.Wait()
	if err != nil {
		t.Fatalf("retrying publisher: %v", err)
	}
	var got []string
	for _, e := range p.stored(t)[n:] {
		got = append(got, e.Node)
	}
	if fmt.Sprint(got) != "[node-b node-c]" {
		t.Fatalf("after recovery stored %q; want [node-b node-c] exactly once", got)
	}
}

// TestDeploymentRoleDevIssuer: every caller needs a pod-bound token on a
// scheduled node, and may report on the node its token names; audit and
// fail-open in config.json are warned about and ignored.
func TestDeploymentRoleDevIssuer(t *testing.T) {
	d := startDev(t)
	p, caFile := startDeployment(t, configJSON([]string{monitor}, "audit", true), d.iss.KubeconfigFile())
	if log := p.Output(); !strings.Contains(log, "always enforces") {
		t.Errorf("no warning about audit/fail-open in the deployment role:\n%s", log)
	}
	dsend := func(tokenFile string, nodes ...string) outcome {
		return sendTLS(t, p, caFile, tokenFile, nodes...)
	}
	check(t, "no token: token_missing", dsend("", "node-b"), outcome{code: codes.Unauthenticated, reason: "token_missing", moved: "violations_total{token_missing}+1"})
	check(t, "a token bound to no pod: unbound_token", dsend(d.token(t, "gpu-health-monitor", "", "", aud), "node-b"),
		outcome{code: codes.PermissionDenied, reason: "unbound_token", moved: "node_claim_total{absent}+1 violations_total{unbound_token}+1"})
	check(t, "a pod never scheduled: node_claim_absent", dsend(d.token(t, "gpu-health-monitor", "pending", "", aud), ""),
		outcome{code: codes.PermissionDenied, reason: "node_claim_absent", moved: "node_claim_total{absent}+1 violations_total{node_claim_absent}+1"})
	onB := d.token(t, "gpu-health-monitor", "gpu-on-b", "node-b", aud)
	check(t, "the node in the token is the node it may report on", dsend(onB, "", "node-b"),
		outcome{code: codes.OK, stored: []string{"node-b", "node-b"}, moved: "decisions_total{node_local}+1 node_claim_total{verified}+1"})
	check(t, "audit in config.json is ignored: another node is refused", dsend(onB, "node-c"),
		outcome{code: codes.PermissionDenied, reason: "node_mismatch", moved: "node_claim_total{verified}+1 violations_total{node_mismatch}+1"})
	check(t, "the cross-node list names other nodes", dsend(d.token(t, "csp-health-monitor", "csp-d", "node-b", aud), "node-c", "node-d"),
		outcome{code: codes.OK, stored: []string{"node-c", "node-d"}, moved: "decisions_total{cross_node}+1 node_claim_total{verified}+1"})
}

// TestStartupRefusals: configuration that cannot be honoured stops the
// process, naming the key.
func TestStartupRefusals(t *testing.T) {
	tests := []struct {
		name, config string
		env          []string
		args         []string
		want         string
	}{
		{"enableNodeBindingAuth missing", `{"AuthAudience": "a", "AuthCrossNodeServiceAccounts": []}`, []string{"NODE_NAME=n"}, nil, "enableNodeBindingAuth is required"},
		{"quoted false", `{"enableNodeBindingAuth": "false"}`, []string{"NODE_NAME=n"}, nil, "real boolean"},
		{"cross-node null", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": null}`, []string{"NODE_NAME=n"}, nil, "AuthCrossNodeServiceAccounts is null"},
		{"socket role without NODE_NAME", configJSON(nil, "", false), []string{"NODE_NAME="}, nil, "NODE_NAME"},
		{"deployment without node binding", `{"enableNodeBindingAuth": false}`, nil, []string{"--role", "deployment", "--listen", "127.0.0.1:0", "--tls-cert-file", "x", "--tls-key-file", "y"}, "requires enableNodeBindingAuth: true"},
		{"deployment without TLS", configJSON(nil, "", false), nil, []string{"--role", "deployment", "--listen", "127.0.0.1:0"}, "TLS only"},
		{"unknown role", configJSON(nil, "", false), []string{"NODE_NAME=n"}, []string{"--role", "sidecar"}, `--role "sidecar"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out := exitOf(t, tt.config, tt.env, tt.args...); !strings.Contains(out, tt.want) {
				t.Fatalf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}

// TestNodeBindingDisabled runs without authentication, loudly.
func TestNodeBindingDisabled(t *testing.T) {
	p := startProc(t, `{"enableNodeBindingAuth": false}`, []string{"NODE_NAME=" + localNode})
	if !strings.Contains(p.Output(), "NO AUTHENTICATION") {
		t.Errorf("no loud warning:\n%s", p.Output())
	}
	check(t, "any caller may name any node", send(t, p, "", "node-z", ""), outcome{code: codes.OK, stored: []string{"node-z", localNode}})
}
