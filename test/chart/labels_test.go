package chart_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestEveryObjectIsLabelled: every object every chart renders, with its
// options on, carries the recommended labels (name, instance, version,
// managed-by, part-of), and every workload has a NetworkPolicy — the
// connector's monitors too.
func TestEveryObjectIsLabelled(t *testing.T) {
	monitoring := "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\ndashboard: {enabled: true}\n"
	for _, c := range []struct{ name, dir, values string }{
		{"pdp", pdpChart, examplePDPValues(t, set(true, "autoscaling", "enabled"), set(map[string]any{"enabled": true}, "serviceMonitor"),
			set(map[string]any{"enabled": true}, "prometheusRule"), set(map[string]any{"enabled": true}, "dashboard"))},
		{"callerauth-proxy", proxyChart, exampleProxyValues(t)},
		{"callerauth-proxy, a sidecar's objects", proxyChart, exampleProxyValues(t, set(map[string]any{"enabled": false}, "deployment"))},
		{"platform-connector", chartDir, auth("    enabled: true\n") + "deployment: {enabled: true}\n" +
			"monitors:\n  csp-health-monitor: {enabled: true, image: registry.example/monitor:1}\n  slurm-drain-monitor: {enabled: true, image: registry.example/monitor:1}\n" + monitoring},
		{"vmafx", vmafxChart, goodVmafx + monitoring},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := renderChart(t, c.dir, "rel", "ns", c.values)
			if err != nil {
				t.Fatal(err)
			}
			var selectors []map[string]string           // each policy's pod selector
			workloads := map[string]map[string]string{} // name → its pods' labels
			for name, body := range out {
				if !strings.HasSuffix(name, ".yaml") {
					continue
				}
				for doc := range strings.SplitSeq(body, "\n---") {
					var o struct {
						Kind     string
						Metadata struct {
							Name   string
							Labels map[string]string
						}
						Spec struct {
							PodSelector struct{ MatchLabels map[string]string } `json:"podSelector"`
							Template    struct {
								Metadata struct{ Labels map[string]string }
							}
						}
					}
					if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if o.Kind == "" {
						continue
					}
					for _, k := range []string{"name", "instance", "version", "managed-by", "part-of"} {
						if o.Metadata.Labels["app.kubernetes.io/"+k] == "" {
							t.Errorf("%s %s/%s has no app.kubernetes.io/%s label", name, o.Kind, o.Metadata.Name, k)
						}
					}
					if o.Metadata.Labels["app.kubernetes.io/instance"] != "" && o.Metadata.Labels["app.kubernetes.io/instance"] != "rel" {
						t.Errorf("%s/%s: instance %q, want the release's name", o.Kind, o.Metadata.Name, o.Metadata.Labels["app.kubernetes.io/instance"])
					}
					switch o.Kind {
					case "Deployment", "DaemonSet", "StatefulSet":
						workloads[o.Metadata.Name] = o.Spec.Template.Metadata.Labels
					case "NetworkPolicy":
						selectors = append(selectors, o.Spec.PodSelector.MatchLabels)
					}
				}
			}
			for w, pods := range workloads {
				covered := false
				for _, sel := range selectors {
					match := len(sel) > 0
					for k, v := range sel {
						match = match && pods[k] == v
					}
					covered = covered || match
				}
				if !covered {
					t.Errorf("workload %s (pods %v) has no NetworkPolicy selecting its pods", w, pods)
				}
			}
		})
	}
}
