// Package chart_test renders deploy/charts/platform-connector with the Helm
// Go library for good and bad values, asserts the render-time refusals, and
// feeds the rendered ConfigMap to the connector's own config loader.
package chart_test

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/kit/charts"
	"github.com/callerauth/callerauth/internal/services/connector"
)

const chartDir = "../../deploy/charts/platform-connector"

// render renders the platform-connector chart into namespace with values
// given as YAML.
func render(t *testing.T, namespace, values string) (map[string]string, error) {
	return renderChart(t, chartDir, "nvsentinel", namespace, values)
}

// renderChart renders the chart in dir as release name in namespace, with
// values given as YAML, as helm template does.
func renderChart(t *testing.T, dir, name, namespace, values string) (map[string]string, error) {
	t.Helper()
	return charts.Render(dir, name, namespace, values)
}

// configJSON extracts config.json from the rendered ConfigMap.
func configJSON(t *testing.T, out map[string]string) []byte {
	t.Helper()
	var cm struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(out["platform-connector/templates/configmap.yaml"]), &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Data["config.json"] == "" {
		t.Fatalf("no config.json rendered:\n%s", out["platform-connector/templates/configmap.yaml"])
	}
	return []byte(cm.Data["config.json"])
}

func auth(extra string) string {
	return "global:\n  platformConnectorAuth:\n" + extra
}

func TestRenderedConfigFeedsTheConnector(t *testing.T) {
	out, err := render(t, "nvsentinel", auth(`    enabled: true
    mode: audit
    failOpenOnUnavailable: true
    crossNodeServiceAccounts: ["system:serviceaccount:ops:fleet-monitor"]
`)+`monitors:
  csp-health-monitor: {enabled: true, image: registry.example/monitor:1}
  slurm-drain-monitor: {enabled: true, image: registry.example/monitor:1}
`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := connector.ParseAuthConfig(configJSON(t, out))
	if err != nil {
		t.Fatalf("the connector refuses the chart's config.json: %v\n%s", err, configJSON(t, out))
	}
	want := []string{"system:serviceaccount:ops:fleet-monitor", "system:serviceaccount:nvsentinel:csp-health-monitor", "system:serviceaccount:nvsentinel:slurm-drain-monitor"}
	if !cfg.EnableNodeBindingAuth || cfg.Mode != guard.Audit || !cfg.FailOpenOnUnavailable || cfg.Audience != "platform-connector.nvsentinel.nvidia.com" ||
		!slices.Equal(cfg.CrossNodeServiceAccounts, want) {
		t.Fatalf("config %+v", cfg)
	}
	// The monitors mount a projected token with the audience and lifetime.
	mon := out["platform-connector/templates/monitors.yaml"]
	for _, w := range []string{"name: csp-health-monitor", "audience: \"platform-connector.nvsentinel.nvidia.com\"", "expirationSeconds: 3600",
		"mountPath: /var/run/secrets/nvsentinel/platform-connector", `value: "/var/run/secrets/nvsentinel/platform-connector/token"`} {
		if !strings.Contains(mon, w) {
			t.Errorf("monitors lack %q:\n%s", w, mon)
		}
	}
	if strings.Contains(mon, "kubernetes-object-monitor") {
		t.Error("a disabled monitor was rendered")
	}
	ds := out["platform-connector/templates/daemonset.yaml"]
	for _, w := range []string{"--role=socket", "fieldPath: spec.nodeName"} {
		if !strings.Contains(ds, w) {
			t.Errorf("daemonset lacks %q", w)
		}
	}
}

// TestMonitorsFollowTheReleaseNamespace: installing elsewhere needs no edit.
func TestMonitorsFollowTheReleaseNamespace(t *testing.T) {
	out, err := render(t, "gpu-health", auth("    enabled: true\n")+"monitors:\n  health-events-analyzer: {enabled: true, image: registry.example/monitor:1}\n")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := connector.ParseAuthConfig(configJSON(t, out))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cfg.CrossNodeServiceAccounts) != "[system:serviceaccount:gpu-health:health-events-analyzer]" {
		t.Fatalf("cross-node %v", cfg.CrossNodeServiceAccounts)
	}
}

func TestDefaults(t *testing.T) {
	out, err := render(t, "nvsentinel", auth("    enabled: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := connector.ParseAuthConfig(configJSON(t, out))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EnableNodeBindingAuth || cfg.Mode != guard.Enforce || cfg.FailOpenOnUnavailable || len(cfg.CrossNodeServiceAccounts) != 0 {
		t.Fatalf("config %+v", cfg)
	}
	if !strings.Contains(string(configJSON(t, out)), `"AuthCrossNodeServiceAccounts":[]`) {
		t.Errorf("an omitted list must render as [], not null: %s", configJSON(t, out))
	}
	if _, ok := out["platform-connector/templates/deployment.yaml"]; ok && strings.Contains(out["platform-connector/templates/deployment.yaml"], "kind: Deployment") {
		t.Error("the deployment role rendered without being enabled")
	}
}

func TestRenderRefusals(t *testing.T) {
	tests := []struct {
		name, values, want string
	}{
		{"enabled not set", auth("    mode: enforce\n"), "enabled must be set explicitly"},
		{"enabled quoted", auth(`    enabled: "false"` + "\n"), "enabled must be a real boolean, got string false"},
		{"enabled zero", auth("    enabled: 0\n"), "enabled must be a real boolean"},
		{"enabled null", auth("    enabled: null\n"), "enabled must be"},
		{"mode warn", auth("    enabled: true\n    mode: warn\n"), "mode must be enforce or audit, got warn"},
		{"failOpen quoted", auth("    enabled: true\n    failOpenOnUnavailable: \"true\"\n"), "failOpenOnUnavailable must be a real boolean"},
		{"lifetime 599", auth("    enabled: true\n    tokenExpirationSeconds: 599\n"), "600 <= x <= 4294967296, got 599"},
		{"lifetime 2^32+1", auth("    enabled: true\n    tokenExpirationSeconds: 4294967297\n"), "600 <= x <= 4294967296, got 4294967297"},
		{"lifetime fractional", auth("    enabled: true\n    tokenExpirationSeconds: 3600.5\n"), "whole number of seconds, got 3600.5"},
		{"lifetime string", auth("    enabled: true\n    tokenExpirationSeconds: \"3600\"\n"), "whole number of seconds, got string"},
		{"mount path relative", auth("    enabled: true\n    tokenMountPath: var/run/token\n"), "tokenMountPath must be an absolute path"},
		{"cross-node null", auth("    enabled: true\n    crossNodeServiceAccounts: null\n"), "crossNodeServiceAccounts is null"},
		{"cross-node not a list", auth("    enabled: true\n    crossNodeServiceAccounts: system:serviceaccount:a:b\n"), "must be a list"},
		{"entry with whitespace", auth("    enabled: true\n    crossNodeServiceAccounts: [\"system:serviceaccount:ops:mon \"]\n"), "contains whitespace"},
		{"entry with uppercase", auth("    enabled: true\n    crossNodeServiceAccounts: [\"system:serviceaccount:Ops:mon\"]\n"), "contains uppercase"},
		{"entry not canonical", auth("    enabled: true\n    crossNodeServiceAccounts: [\"ops:mon\"]\n"), "want system:serviceaccount:<namespace>:<name>"},
		{"namespace too long", auth("    enabled: true\n    crossNodeServiceAccounts: [\"system:serviceaccount:" + strings.Repeat("a", 64) + ":mon\"]\n"), "DNS-1123 label of at most 63"},
		{"name with underscore", auth("    enabled: true\n    crossNodeServiceAccounts: [\"system:serviceaccount:ops:mon_1\"]\n"), "DNS-1123 subdomain"},
		{"deployment without auth", auth("    enabled: false\n") + "deployment: {enabled: true}\n", "deployment.enabled requires global.platformConnectorAuth.enabled: true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, "nvsentinel", tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render: %v; want an error containing %q", err, tt.want)
			}
		})
	}
	// The edges are accepted.
	for _, v := range []string{"600", "4294967296"} {
		if _, err := render(t, "nvsentinel", auth("    enabled: true\n    tokenExpirationSeconds: "+v+"\n")); err != nil {
			t.Errorf("tokenExpirationSeconds %s refused: %v", v, err)
		}
	}
}

// TestWatchBoundObjects: the socket role watches bound objects by default —
// arguments the connector's own flags accept, and RBAC that grants list and
// watch on pods and serviceaccounts and nothing else; turned off, neither
// the flag nor the role is rendered.
func TestWatchBoundObjects(t *testing.T) {
	// Off by default: it would let every node's agent read every pod.
	def, err := render(t, "nvsentinel", auth("    enabled: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(def["platform-connector/templates/daemonset.yaml"], "--caller-watch-bound-objects") || strings.Contains(def["platform-connector/templates/rbac.yaml"], "pods") {
		t.Fatal("the socket role watches bound objects by default")
	}
	out, err := render(t, "nvsentinel", auth("    enabled: true\n    apiServerIssuer: https://oidc.eks.example/id/ABC\n")+"daemonset: {watchBoundObjects: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `json:"args"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(out["platform-connector/templates/daemonset.yaml"]), &ds); err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	cmd := connector.NewCommand(io.Discard, io.Discard, func(string) string { return "" })
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("the connector refuses the chart's arguments %v: %v", args, err)
	}
	if v, _ := cmd.Flags().GetBool("caller-watch-bound-objects"); !v {
		t.Fatalf("--caller-watch-bound-objects not set by %v", args)
	}
	if v, _ := cmd.Flags().GetStringArray("caller-issuer"); !slices.Equal(v, []string{"https://oidc.eks.example/id/ABC"}) {
		t.Fatalf("--caller-issuer %v", v)
	}
	var rules []string
	for _, doc := range strings.Split(out["platform-connector/templates/rbac.yaml"], "\n---\n") {
		var obj struct {
			Kind  string `json:"kind"`
			Rules []struct {
				APIGroups []string `json:"apiGroups"`
				Resources []string `json:"resources"`
				Verbs     []string `json:"verbs"`
			} `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "ClusterRole" {
			for _, r := range obj.Rules {
				rules = append(rules, fmt.Sprintf("%v %v %v", r.APIGroups, r.Resources, r.Verbs))
			}
		}
	}
	if want := []string{"[authentication.k8s.io] [tokenreviews] [create]", "[] [pods serviceaccounts] [list watch]"}; !slices.Equal(rules, want) {
		t.Fatalf("ClusterRole rules %q; want %q", rules, want)
	}

	off, err := render(t, "nvsentinel", auth("    enabled: true\n")+"daemonset:\n  watchBoundObjects: false\n")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(off["platform-connector/templates/daemonset.yaml"], "--caller-watch-bound-objects") ||
		strings.Contains(off["platform-connector/templates/rbac.yaml"], "bound-objects") {
		t.Fatalf("watchBoundObjects false still renders the flag or the role:\n%s", off["platform-connector/templates/rbac.yaml"])
	}
}

// TestChartsNameTheVersion: every chart's version and appVersion are the
// VERSION file's, so a chart's default image is the one make images tags
// from the same commit (docs/releasing.md).
func TestChartsNameTheVersion(t *testing.T) {
	v, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	for _, dir := range []string{chartDir, pdpChart, vmafxChart, proxyChart} {
		var c struct {
			Version    string `json:"version"`
			AppVersion string `json:"appVersion"`
		}
		if err := yaml.Unmarshal(mustReadFile(t, dir+"/Chart.yaml"), &c); err != nil {
			t.Fatal(err)
		}
		if c.AppVersion != version || c.Version != version {
			t.Errorf("%s: version %q, appVersion %q; VERSION says %q", dir, c.Version, c.AppVersion, version)
		}
	}
}
