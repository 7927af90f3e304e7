package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/kit/eventsvc"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/scrape"
)

// Node binding, as the platform-connector's socket role on node-a sees it:
// a gRPC server on a Unix socket, the guard with the node-binding rule, tokens
// from the dev issuer verified by TokenReview through the verdict cache.

const (
	connectorNode = "node-a"
	connectorAud  = "platform-connector"
	crossNodeSA   = "system:serviceaccount:nvsentinel:csp-health-monitor"
)

// guardedServer is a socket-role events server behind the guard.
type guardedServer struct {
	conn *grpc.ClientConn
	reg  *prometheus.Registry
	stop func()
}

func (e *env) startConnector(mode guard.Mode, failOpen bool, validatorDown bool) (*guardedServer, error) {
	var auth authn.Authenticator
	var err error
	if validatorDown {
		addr, lerr := loopback.Addr()
		if lerr != nil {
			return nil, lerr
		}
		auth, err = kube.New(kube.Config{REST: &rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{CAFile: e.iss.CAFile()}},
			Audiences: []string{connectorAud}, Timeout: time.Second})
	} else {
		auth, err = kube.New(kube.Config{Kubeconfig: e.iss.KubeconfigFile(), Audiences: []string{connectorAud}})
	}
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	nm, err := binding.NewNodeMetrics(reg, "platform_connector")
	if err != nil {
		return nil, err
	}
	o := callers.NewOptions()
	o.Audience, o.Mode, o.FailOpenOnUnavailable = connectorAud, string(mode), failOpen
	cfg, err := o.Complete()
	if err != nil {
		return nil, err
	}
	st, err := callers.New(cfg.WithAuthenticator(auth, "TokenReview"), callers.Service{Name: "platform_connector",
		Rule:     binding.NodeBinding(binding.NodeConfig{LocalNode: connectorNode, CrossNode: []string{crossNodeSA}, Metrics: nm}),
		Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	g := st.Guard
	sock := filepath.Join(e.dir, fmt.Sprintf("connector-%d.sock", time.Now().UnixNano()))
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(g.UnaryServerInterceptor(eventsvc.Extract)))
	srv.RegisterService(&eventsvc.Desc, nil)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return &guardedServer{conn: conn, reg: reg, stop: func() { _ = conn.Close(); srv.Stop() }}, nil
}

// report sends a batch and describes what happened: the code and reason,
// or the nodes as stamped; and which counters moved.
func (c *guardedServer) report(ctx context.Context, tok string, nodes ...string) (code, reason string, stamped []string, moved string) {
	before := gather(c.reg)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if tok != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	out := new(structpb.ListValue)
	err := c.conn.Invoke(ctx, eventsvc.Method, eventsvc.List(nodes), out)
	after := gather(c.reg)
	var changes []string
	for k, v := range after {
		if d := v - before[k]; d != 0 && strings.Contains(k, "violations") {
			changes = append(changes, fmt.Sprintf("%s+%g", strings.TrimPrefix(k, "platform_connector_auth_violations_total"), d))
		}
	}
	moved = strings.Join(changes, " ")
	if err != nil {
		st := status.Convert(err)
		return st.Code().String(), st.Message(), nil, moved
	}
	return "OK", "", eventsvc.Nodes(out), moved
}

// gather reads reg's counters and gauges as "name{label values}" (or
// "name" without labels) → value.
func gather(reg *prometheus.Registry) map[string]float64 {
	v, _ := scrape.Values(reg)
	return v
}

func (e *env) monitorToken(sa, pod, node string) (string, error) {
	tok, err := e.iss.Mint(devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: sa, Audiences: []string{connectorAud}, Pod: pod, Node: node})
	return tok.Token, err
}

type nodeCase struct {
	scenario, expected string
	mode               guard.Mode
	failOpen, down     bool
	sa, pod, node      string
	nodes              []string
	check              func(code, reason string, stamped []string, moved string) bool
}

func nodeScenario(c nodeCase) func(context.Context, *env) Result {
	return func(ctx context.Context, e *env) Result {
		r := Result{Scenario: c.scenario, Expected: c.expected}
		mode := c.mode
		if mode == "" {
			mode = guard.Enforce
		}
		conn, err := e.startConnector(mode, c.failOpen, c.down)
		if err != nil {
			return fail(r, err)
		}
		defer conn.stop()
		tok, err := e.monitorToken(c.sa, c.pod, c.node)
		if err != nil {
			return fail(r, err)
		}
		code, reason, stamped, moved := conn.report(ctx, tok, c.nodes...)
		if code == "OK" {
			r.Observed = fmt.Sprintf("OK, stored as %q", stamped)
		} else {
			r.Observed = code + " " + reason
		}
		if moved != "" {
			r.Observed += "; counted " + moved
		}
		r.Pass = c.check(code, reason, stamped, moved)
		return r
	}
}

var nodeScenarios = []func(context.Context, *env) Result{
	nodeScenario(nodeCase{
		scenario: "node: own-node publisher, blank node name", expected: "OK, stamped node-a",
		sa: "gpu-health-monitor", pod: "gpu-mon-a", node: connectorNode, nodes: []string{"", connectorNode},
		check: func(code, _ string, s []string, moved string) bool {
			return code == "OK" && fmt.Sprint(s) == "[node-a node-a]" && moved == ""
		},
	}),
	nodeScenario(nodeCase{
		scenario: "node: publisher names another node", expected: "PermissionDenied node_mismatch",
		sa: "gpu-health-monitor", pod: "gpu-mon-a2", node: connectorNode, nodes: []string{"node-b"},
		check: func(code, reason string, _ []string, moved string) bool {
			return code == "PermissionDenied" && reason == "node_mismatch" && moved == "{node_mismatch}+1"
		},
	}),
	nodeScenario(nodeCase{
		scenario: "node: allowlisted pod-bound monitor, other nodes", expected: "OK, cross-node",
		sa: "csp-health-monitor", pod: "csp-0", node: connectorNode, nodes: []string{"node-b", "node-c"},
		check: func(code, _ string, s []string, _ string) bool {
			return code == "OK" && fmt.Sprint(s) == "[node-b node-c]"
		},
	}),
	nodeScenario(nodeCase{
		scenario: "node: allowlisted monitor, token bound to no pod", expected: "PermissionDenied unbound_cross_node_token",
		sa: "csp-health-monitor", nodes: []string{"node-b"},
		check: func(code, reason string, _ []string, _ string) bool {
			return code == "PermissionDenied" && reason == "unbound_cross_node_token"
		},
	}),
	nodeScenario(nodeCase{
		scenario: "node: audit mode, publisher names another node", expected: "OK (let through), node_mismatch counted",
		mode: guard.Audit, sa: "gpu-health-monitor", pod: "gpu-mon-a3", node: connectorNode, nodes: []string{"node-b"},
		check: func(code, _ string, s []string, moved string) bool {
			return code == "OK" && fmt.Sprint(s) == "[node-b]" && moved == "{node_mismatch}+1"
		},
	}),
	nodeScenario(nodeCase{
		scenario: "node: validator down, failOpenOnUnavailable false", expected: "Unavailable validator_unavailable",
		down: true, sa: "gpu-health-monitor", pod: "gpu-mon-a4", node: connectorNode, nodes: []string{""},
		check: func(code, reason string, _ []string, moved string) bool {
			return code == "Unavailable" && reason == "validator_unavailable" && moved == "{validator_unavailable}+1"
		},
	}),
	nodeScenario(nodeCase{
		scenario: "node: validator down, fail-open, blank name", expected: "OK, degraded: stamped node-a, still counted",
		down: true, failOpen: true, sa: "gpu-health-monitor", pod: "gpu-mon-a5", node: connectorNode, nodes: []string{""},
		check: func(code, _ string, s []string, moved string) bool {
			return code == "OK" && fmt.Sprint(s) == "[node-a]" && moved == "{validator_unavailable}+1"
		},
	}),
	nodeScenario(nodeCase{
		scenario: "node: validator down, fail-open, other node", expected: "Unavailable (retryable), not node_mismatch",
		down: true, failOpen: true, sa: "csp-health-monitor", pod: "csp-1", node: connectorNode, nodes: []string{"node-b"},
		check: func(code, reason string, _ []string, moved string) bool {
			return code == "Unavailable" && reason == "validator_unavailable" && moved == "{validator_unavailable}+1"
		},
	}),
}
