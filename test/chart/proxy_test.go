package chart_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

const proxyChart = "../../deploy/charts/callerauth-proxy"

// exampleProxyValues put the proxy in front of a metrics endpoint, with
// Kubernetes RBAC and kube-rbac-proxy's rewrites example as its
// configuration file, as YAML after edit changed them.
func exampleProxyValues(t *testing.T, edit ...func(v map[string]any)) string {
	t.Helper()
	v := map[string]any{
		"upstream": "http://metrics-app.monitoring.svc:8080",
		"tls":      map[string]any{"secretName": "metrics-proxy-tls"},
		"caller":   map[string]any{"audience": "metrics-app.monitoring.svc"},
		"allow":    map[string]any{"serviceAccounts": []string{"monitoring:*"}},
		"authorization": map[string]any{"mode": "rbac",
			"configFile": string(mustReadFile(t, "../../internal/services/proxy/testdata/kube-rbac-proxy/rewrites/config-file.yaml"))},
		"ignorePaths": []string{"/healthz"},
	}
	for _, e := range edit {
		e(v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestProxyChartFeedsTheProxy renders the chart and hands the result to
// the proxy itself: the rendered command line passes its flag parsing
// and, with the rendered configuration file and a serving pair where the
// pod would mount them, its validation, which reads the file.
func TestProxyChartFeedsTheProxy(t *testing.T) {
	out, err := renderChart(t, proxyChart, "metrics", "monitoring", exampleProxyValues(t))
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, out)
	d := findDeployment(t, out["callerauth-proxy/templates/deployment.yaml"])
	args := d.Spec.Template.Spec.Containers[0].Args
	root := t.TempDir()
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "/etc/callerauth-proxy", root)
	}
	data, _ := objs["ConfigMap/metrics-callerauth-proxy-config"]["data"].(map[string]any)
	file, _ := data["config-file.yaml"].(string)
	if file != string(mustReadFile(t, "../../internal/services/proxy/testdata/kube-rbac-proxy/rewrites/config-file.yaml")) {
		t.Fatalf("the rendered configuration file differs from the one given:\n%s", file)
	}
	o := proxyAccepts(t, root, args, map[string][]byte{"config/config-file.yaml": []byte(file)})
	if o.Authorization != proxy.AuthorizationRBAC || o.Callers.Audience != "metrics-app.monitoring.svc" || len(o.AllowServiceAccounts) != 1 ||
		len(o.IgnorePaths) != 1 || o.Upstream != "http://metrics-app.monitoring.svc:8080" {
		t.Fatalf("options %+v", o)
	}
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.SubPath != "" {
			t.Fatalf("a subPath mount never sees an updated Secret: %+v", m)
		}
	}

	// The sidecar way: the account, its grants and the file, no workload.
	out, err = renderChart(t, proxyChart, "metrics", "monitoring", exampleProxyValues(t, set(false, "deployment", "enabled")))
	if err != nil {
		t.Fatal(err)
	}
	objs = manifests(t, out)
	for _, want := range []string{"ServiceAccount/metrics-callerauth-proxy", "ClusterRole/metrics-callerauth-proxy-monitoring-review", "ConfigMap/metrics-callerauth-proxy-config"} {
		if objs[want] == nil {
			t.Errorf("sidecar: no %s rendered", want)
		}
	}
	for k := range objs {
		if strings.HasPrefix(k, "Deployment/") || strings.HasPrefix(k, "Service/") {
			t.Errorf("sidecar: %s rendered", k)
		}
	}
}

func TestProxyChartRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no upstream", set("", "upstream"), "upstream is required"},
		{"no audience", set("", "caller", "audience"), "caller.audience is required"},
		{"no TLS", set("", "tls", "secretName"), "tls.secretName is required"},
		{"nobody allowed", func(v map[string]any) {
			set("allow", "authorization", "mode")(v)
			set("", "authorization", "configFile")(v)
			v["allow"] = map[string]any{}
		}, "name the callers let through"},
		{"a file without rbac", set("allow", "authorization", "mode"), "authorization.configFile belongs to authorization.mode rbac"},
		{"a mode", set("warn", "caller", "mode"), "caller.mode \"warn\""},
		{"both path lists", set([]string{"/metrics"}, "allowPaths"), "ignorePaths and allowPaths"},
	} {
		if _, err := renderChart(t, proxyChart, "metrics", "monitoring", exampleProxyValues(t, c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// proxyAccepts lays a serving pair and files under root, where the pod
// would mount them (args already point there), and returns the options
// the proxy parses and validates from args.
func proxyAccepts(t *testing.T, root string, args []string, files map[string][]byte) proxy.Options {
	t.Helper()
	ca, err := pki.NewCA("chart")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("proxy", "metrics-callerauth-proxy.monitoring.svc")
	if err != nil {
		t.Fatal(err)
	}
	files["tls/tls.crt"], files["tls/tls.key"] = cert, key
	for name, b := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o, err := proxy.ParseArgs(args)
	if err != nil {
		t.Fatalf("the proxy refuses the flags: %v\n%s", err, strings.Join(args, "\n"))
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the proxy's validation refuses the flags: %v\n%s", err, strings.Join(args, "\n"))
	}
	return o
}

// TestProxySidecarBlock: docs/proxy.md's sidecar container, as it is,
// meets Pod Security restricted on its own — by the admission's checks and
// by the real API server admitting it in a restricted namespace — and the
// proxy accepts its arguments.
func TestProxySidecarBlock(t *testing.T) {
	doc := string(mustReadFile(t, "../../docs/proxy.md"))
	_, rest, ok := strings.Cut(doc, "```yaml sidecar\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/proxy.md has no ```yaml sidecar block")
	}
	var c corev1.Container
	if err := yaml.UnmarshalStrict([]byte(block), &c); err != nil {
		t.Fatalf("the sidecar block: %v", err)
	}
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ServiceAccountName: "metrics-callerauth-proxy", // the chart's, deployment.enabled false
		Containers:         []corev1.Container{c},
		Volumes:            []corev1.Volume{{Name: "callerauth-proxy-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "metrics-proxy-tls"}}}},
	}}
	if f := restrictedFailures(t, tmpl); len(f) > 0 {
		t.Errorf("the sidecar fails Pod Security restricted: %v", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	psNamespace(ctx, t, "proxy-sidecar", restricted)
	if _, err := apiserver.ServiceAccount(ctx, "proxy-sidecar", "metrics-callerauth-proxy"); err != nil {
		t.Fatal(err)
	}
	if err := dryRunPod(ctx, "proxy-sidecar", "sidecar", tmpl); err != nil {
		t.Errorf("a restricted namespace refuses the sidecar: %v", err)
	}
	root := t.TempDir()
	args := slices.Clone(c.Args)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "/etc/callerauth-proxy", root)
	}
	if o := proxyAccepts(t, root, args, map[string][]byte{}); o.Upstream != "http://127.0.0.1:8080" {
		t.Errorf("options %+v", o)
	}
}

// TestProxyChartDecisionLogAndTraces: the decision log's and the traces'
// values render flags the proxy itself accepts, a port of its own for the
// log's readers (in the Service and the NetworkPolicy), and the mounts
// they name; refused when they could not work.
func TestProxyChartDecisionLogAndTraces(t *testing.T) {
	values := exampleProxyValues(t,
		set(map[string]any{"enabled": true, "searchSecret": map[string]any{"name": "decisions-db"}, "keySecret": map[string]any{"name": "decisions-key"},
			"reader": "system:serviceaccount:audit:auditor", "readers": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"name": "audit"}}}}}, "decisionLog"),
		set(map[string]any{"otlpEndpoint": "otel-collector.observability.svc:4318", "protocol": "http", "caConfigMap": map[string]any{"name": "otel-ca"}}, "tracing"))
	out, err := renderChart(t, proxyChart, "metrics", "monitoring", values)
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, out)
	d := findDeployment(t, out["callerauth-proxy/templates/deployment.yaml"])
	args := slices.Clone(d.Spec.Template.Spec.Containers[0].Args)
	root := t.TempDir()
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "/etc/callerauth-proxy", root)
	}
	data, _ := objs["ConfigMap/metrics-callerauth-proxy-config"]["data"].(map[string]any)
	file, _ := data["config-file.yaml"].(string)
	skey, _, err := note.GenerateKey(rand.Reader, "proxy.example/decisions")
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range args { // the log's directory, where the test can make it
		args[i] = strings.Replace(a, "--decision-log=/var/lib/callerauth-proxy/decisions", "--decision-log="+root+"/decisions", 1)
	}
	o := proxyAccepts(t, root, args, map[string][]byte{"config/config-file.yaml": []byte(file),
		"decision-log-key/decisions.key": []byte(skey), "decision-log-search/uri": []byte("postgres://u@db.example:5432/decisions?sslmode=verify-full")})
	dl := o.DecisionLog
	if d.Kind != "StatefulSet" || dl.Dir != root+"/decisions" || !strings.Contains(out["callerauth-proxy/templates/deployment.yaml"], "--decision-log=/var/lib/callerauth-proxy/decisions\n") || !strings.Contains(out["callerauth-proxy/templates/deployment.yaml"], "mountPath: /var/lib/callerauth-proxy/decisions}") || dl.Replica != "$(POD_NAME)" || dl.SearchURLFile != root+"/decision-log-search/uri" || dl.KeyFile != root+"/decision-log-key/decisions.key" || dl.Mode != "required" ||
		o.DecisionLogListen != ":8444" || !slices.Contains(o.CallerBindings, "callerauth/decision-log=system:serviceaccount:audit:auditor") {
		t.Errorf("decision log options %+v, listen %q, bindings %v", dl, o.DecisionLogListen, o.CallerBindings)
	}
	if tr := o.Serve.Tracing; tr.Endpoint != "otel-collector.observability.svc:4318" || tr.Protocol != "http" || tr.CAFile != root+"/otlp-ca/ca.crt" || tr.SampleRatio != 1 {
		t.Errorf("tracing options %+v", tr)
	}
	svc := objs["Service/metrics-callerauth-proxy"]
	if !strings.Contains(fmt.Sprint(svc["spec"]), "name:decision-log port:8444") {
		t.Errorf("the Service has no decision-log port: %v", svc["spec"])
	}
	np := fmt.Sprint(objs["NetworkPolicy/metrics-callerauth-proxy"]["spec"])
	if !strings.Contains(np, "port:decision-log") || !strings.Contains(np, "name:audit") {
		t.Errorf("the NetworkPolicy does not admit the readers to the log's port alone: %s", np)
	}
	vols := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v.Secret.SecretName + v.ConfigMap.Name
	}
	if vols["decision-log-search"] != "decisions-db" || vols["decision-log-key"] != "decisions-key" || vols["otlp-ca"] != "otel-ca" {
		t.Errorf("volumes %v", vols)
	}

	refuses(t, append(decisionLogRefusals(),
		refusal{"the proxy's own port", set(map[string]any{"enabled": true, "searchSecret": map[string]any{"name": "u"}, "keySecret": map[string]any{"name": "k"}, "port": 8443}, "decisionLog"), "decisionLog.port 8443"},
		refusal{"as a sidecar", func(v map[string]any) {
			set(false, "deployment", "enabled")(v)
			set(map[string]any{"enabled": true, "searchSecret": map[string]any{"name": "u"}, "keySecret": map[string]any{"name": "k"}}, "decisionLog")(v)
		}, "standalone"},
	), func(edit func(map[string]any)) error {
		_, err := renderChart(t, proxyChart, "metrics", "monitoring", exampleProxyValues(t, edit))
		return err
	})
}
