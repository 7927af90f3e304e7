package chart_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"golang.org/x/mod/sumdb/note"
	"sigs.k8s.io/yaml"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	secretsengine "github.com/callerauth/callerauth/examples/secrets-engine"
	"github.com/callerauth/callerauth/examples/todo"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/services/connector"
)

var (
	buildOnce sync.Once
	bins      map[string]string
	buildErr  error
)

// binaries builds the three services once for the monitoring tests.
func binaries(t *testing.T) map[string]string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chart-monitoring-")
		if err != nil {
			buildErr = err
			return
		}
		bins, buildErr = e2e.Build(dir, "cmd/pdp", "cmd/platform-connector", "cmd/vmafx-controller")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

// monitored is what a chart ships for operators to look at.
type monitored struct {
	rules     []byte   // the PrometheusRule's spec: a Prometheus rule file
	dashboard []byte   // the Grafana dashboard JSON
	selector  []string // label=value the ServiceMonitor selects, sorted
	services  []map[string]any
}

// renderMonitoring renders a chart's monitoring objects and checks their
// shape: a ServiceMonitor selecting a Service that has a metrics port, a
// PrometheusRule, a dashboard ConfigMap labelled for Grafana's sidecar.
func renderMonitoring(t *testing.T, out map[string]string) monitored {
	t.Helper()
	var m monitored
	objs := manifests(t, out)
	for key, o := range objs {
		switch {
		case strings.HasPrefix(key, "PrometheusRule/"):
			b, err := yaml.Marshal(o["spec"])
			if err != nil {
				t.Fatal(err)
			}
			m.rules = b
		case strings.HasPrefix(key, "ConfigMap/") && strings.HasSuffix(key, "-dashboard"):
			labels := o["metadata"].(map[string]any)["labels"].(map[string]any)
			if labels["grafana_dashboard"] != "1" {
				t.Errorf("%s: not labelled for the Grafana sidecar: %v", key, labels)
			}
			for _, v := range o["data"].(map[string]any) {
				m.dashboard = []byte(v.(string))
			}
		case strings.HasPrefix(key, "ServiceMonitor/"):
			spec := o["spec"].(map[string]any)
			for k, v := range spec["selector"].(map[string]any)["matchLabels"].(map[string]any) {
				m.selector = append(m.selector, k+"="+v.(string))
			}
			sort.Strings(m.selector)
			if port := spec["endpoints"].([]any)[0].(map[string]any)["port"]; port != "metrics" {
				t.Errorf("%s scrapes port %v", key, port)
			}
		case strings.HasPrefix(key, "Service/"):
			m.services = append(m.services, o)
		}
	}
	if m.rules == nil || m.dashboard == nil || m.selector == nil {
		t.Fatalf("monitoring not rendered: rules %t, dashboard %t, ServiceMonitor %t", m.rules != nil, m.dashboard != nil, m.selector != nil)
	}
	// The ServiceMonitor finds a Service with a metrics port.
	found := false
	for _, svc := range m.services {
		labels, _ := svc["metadata"].(map[string]any)["labels"].(map[string]any)
		all := true
		for _, kv := range m.selector {
			k, v, _ := strings.Cut(kv, "=")
			all = all && labels[k] == v
		}
		for _, p := range svc["spec"].(map[string]any)["ports"].([]any) {
			found = found || (all && p.(map[string]any)["name"] == "metrics")
		}
	}
	if !found {
		t.Fatalf("no Service with a metrics port matches the ServiceMonitor's selector %v", m.selector)
	}
	return m
}

// metricNames parses every PromQL expression of the rules (with
// Prometheus's own rule-file parser) and of the dashboard, and returns the
// metric names they select.
func metricNames(t *testing.T, m monitored) []string {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.Parse(m.rules, false, model.UTF8Validation, p, nil)
	if len(errs) > 0 {
		t.Fatalf("the rules do not parse: %v\n%s", errs, m.rules)
	}
	var exprs []string
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			if r.Alert != "" {
				alerts++
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("alert %s: want a severity, a summary and a description", r.Alert)
				}
			}
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(m.dashboard, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	for _, panel := range dash.Panels {
		for _, target := range panel.Targets {
			// Grafana's variables, as a query would see them.
			exprs = append(exprs, strings.ReplaceAll(target.Expr, "$namespace", "ns"))
		}
	}
	names := map[string]bool{}
	for _, e := range exprs {
		expr, err := p.ParseExpr(e)
		if err != nil {
			t.Fatalf("PromQL %q: %v", e, err)
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				names[vs.Name] = true
			}
			return nil
		})
	}
	t.Logf("%d alerts, %d dashboard panels, %d metrics named", alerts, len(dash.Panels), len(names))
	var out []string
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// exported scrapes a running service's /metrics and returns every series
// name it could be selected by (a histogram's _bucket, _sum and _count).
func exported(t *testing.T, addr string) map[string]bool {
	t.Helper()
	mfs, err := scrape.Families(addr)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for name, mf := range mfs {
		out[name] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
		}
	}
	return out
}

func checkExported(t *testing.T, names []string, have map[string]bool) {
	t.Helper()
	var missing []string
	for _, n := range names {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the rules or the dashboard name metrics the running service does not export: %v", missing)
	}
}

func monitoringOn() string {
	return "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\ndashboard: {enabled: true}\n"
}

// TestMonitoringPDP: the pdp chart's alerts and dashboard parse, and every
// metric they name is one a running pdp exports.
func TestMonitoringPDP(t *testing.T) {
	out, err := renderPDP(t, examplePDPValues(t, set(true, "serviceMonitor", "enabled"), set(true, "prometheusRule", "enabled"), set(true, "dashboard", "enabled")))
	if err != nil {
		t.Fatal(err)
	}
	names := metricNames(t, renderMonitoring(t, out))
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	dir := t.TempDir()
	key := filepath.Join(dir, "signing.pem")
	if err := decision.GenerateKeyFile(key); err != nil {
		t.Fatal(err)
	}
	// Its decision log on, witnessed (by a witness nobody runs: the
	// witness series exist all the same), so that the log's series exist.
	logKey, _, err := note.GenerateKey(rand.Reader, "pdp.test/monitoring")
	if err != nil {
		t.Fatal(err)
	}
	_, witnessKey, err := note.GenerateKey(rand.Reader, "witness.test/nobody")
	if err != nil {
		t.Fatal(err)
	}
	logKeyFile, policy := filepath.Join(dir, "log.key"), filepath.Join(dir, "witnesses")
	if err := os.WriteFile(logKeyFile, []byte(logKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte("witness "+witnessKey+" http://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := e2e.Start(t, binaries(t)["pdp"], []string{"--listen", "127.0.0.1:0", "--insecure-http", "--metrics-listen", "127.0.0.1:0",
		"--policy-dir", "../../examples/secrets-engine/policy", "--registry", "../../examples/secrets-engine/registry.json",
		"--signing-key-file", key, "--kubeconfig", iss.KubeconfigFile(), "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine",
		"--decision-log", filepath.Join(dir, "decisions"), "--decision-log-key-file", logKeyFile, "--decision-log-witnesses", policy})
	// One check, so that the per-decision series exist.
	addr := p.LogValue(t, "pdp: serving", "address", 60*time.Second)
	post(t, "http://"+addr+"/v1/check", mint(t, iss, "secrets-engine", "secrets-engine"), secretsengine.AllowRequest())
	have := exported(t, p.LogValue(t, "pdp: serving", "metrics", time.Second))
	// The AuthZEN series are a pdp serving an AuthZEN package's.
	az := e2e.Start(t, binaries(t)["pdp"], []string{"--listen", "127.0.0.1:0", "--insecure-http", "--metrics-listen", "127.0.0.1:0",
		"--policy-dir", "../../examples/todo/policy", "--registry", "../../examples/todo/registry.json",
		"--signing-key-file", key, "--kubeconfig", iss.KubeconfigFile(), "--caller-binding", "todo=system:serviceaccount:todo:todo-backend"})
	post(t, "http://"+az.LogValue(t, "pdp: serving", "address", 60*time.Second)+"/access/v1/evaluation", mint(t, iss, "todo", "todo-backend"),
		[]byte(`{"subject":{"type":"user","id":"`+todo.Morty+`"},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t"}}`))
	for n := range exported(t, az.LogValue(t, "pdp: serving", "metrics", time.Second)) {
		have[n] = true
	}
	checkExported(t, names, have)
}

// mint is a dev-issuer service-account token for the pdp's audience.
func mint(t *testing.T, iss *devissuer.Issuer, namespace, sa string) string {
	t.Helper()
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: namespace, ServiceAccount: sa, Audiences: []string{"flex-auth"}})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// post sends body with the token and wants 200.
func post(t *testing.T, url, token string, body []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
}

// TestMonitoringConnector: the same for the platform-connector chart and
// a running connector.
func TestMonitoringConnector(t *testing.T) {
	out, err := render(t, "nvsentinel", auth("    enabled: true\n")+monitoringOn())
	if err != nil {
		t.Fatal(err)
	}
	names := metricNames(t, renderMonitoring(t, out))
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	dir := t.TempDir()
	config := filepath.Join(dir, "config.json")
	if err := os.WriteFile(config, configJSON(t, out), 0o600); err != nil {
		t.Fatal(err)
	}
	p := e2e.Start(t, binaries(t)["platform-connector"], []string{"--role", "socket", "--config", config, "--socket", filepath.Join(dir, "pc.sock"),
		"--datastore", filepath.Join(dir, "events.db"), "--metrics-listen", "127.0.0.1:0", "--kubeconfig", iss.KubeconfigFile()}, "NODE_NAME=node-a")
	metrics := p.LogValue(t, "connector: serving", "metrics", 60*time.Second)
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-health-monitor", Pod: "monitor-a", Node: "node-a", Audiences: []string{"platform-connector.nvsentinel.nvidia.com"}})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	_ = os.WriteFile(tokenFile, []byte(tok.Token), 0o600)
	pub, err := connector.NewPublisher(credentials.Config{Address: "unix://" + filepath.Join(dir, "pc.sock"), TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, &pcv1.HealthEvent{Version: 1, Agent: "monitoring", CheckName: "GpuXid", NodeName: "node-a"}); err != nil {
		t.Fatal(err)
	}
	checkExported(t, names, exported(t, metrics))
}

// TestMonitoringVmafx: the same for the vmafx chart and a running
// controller.
func TestMonitoringVmafx(t *testing.T) {
	out, err := renderVmafx(t, goodVmafx+monitoringOn())
	if err != nil {
		t.Fatal(err)
	}
	names := metricNames(t, renderMonitoring(t, out))
	iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	dir := t.TempDir()
	authnConfig := filepath.Join(dir, "authn.yaml")
	doc, _, err := authconfig.Convert(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(),
		Audiences: []string{"vmafx-controller"}, Tenant: "tenant-a", RolesClaim: "scp"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(authnConfig, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("monitoring")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, _ := ca.Issue("127.0.0.1", "127.0.0.1")
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(cert, certPEM, 0o600)
	_ = os.WriteFile(key, keyPEM, 0o600)
	p := e2e.Start(t, binaries(t)["vmafx-controller"], []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--tls-cert-file", cert, "--tls-key-file", key, "--caller-authentication-config", authnConfig, "--datastore", filepath.Join(dir, "jobs.db")})
	metrics := p.LogValue(t, "controller: serving", "metrics", 60*time.Second)
	// One RPC, so that the per-method series exist.
	tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: "dash", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"scp": "vmafx:reader"}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := loopback.DialTLS(p.LogValue(t, "controller: serving", "address", time.Second), ca.Pool(), tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := vmafxv1.NewJobServiceClient(conn).ListJobs(context.Background(), &vmafxv1.ListJobsRequest{}); err != nil {
		t.Fatal(err)
	}
	checkExported(t, names, exported(t, metrics))
	if !slices.Contains(names, "vmafx_controller_lease_expiries_total") {
		t.Fatal("the lease-expiry alert is gone")
	}
}
