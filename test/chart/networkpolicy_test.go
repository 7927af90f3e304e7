package chart_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// networkPolicies are the NetworkPolicies of a render.
func networkPolicies(t *testing.T, out map[string]string) []map[string]any {
	t.Helper()
	var nps []map[string]any
	for name, body := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for doc := range strings.SplitSeq(body, "\n---") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if o["kind"] == "NetworkPolicy" {
				nps = append(nps, o)
			}
		}
	}
	return nps
}

// TestNetworkPoliciesAdmitOnlyWhomTheyName: in every chart, an empty list
// of callers or metrics scrapers admits nobody — a NetworkPolicy rule
// with an empty or missing from admits every source, so none is
// rendered — and no rule of any policy, with any values, admits every
// source.
func TestNetworkPoliciesAdmitOnlyWhomTheyName(t *testing.T) {
	nobody := map[string]any{"enabled": true, "callers": []any{}, "metricsScrapers": []any{}}
	cases := []struct {
		name, dir, release, values string
		// open: the port names still admitted with nobody listed (the
		// vmafx controller's grpc: its node and operator, always).
		open []string
	}{
		{"pdp", pdpChart, "flex-auth", examplePDPValues(t, set(nobody, "networkPolicy")), nil},
		{"callerauth-proxy", proxyChart, "metrics", exampleProxyValues(t, set(nobody, "networkPolicy")), nil},
		{"platform-connector, both roles", chartDir, "nvsentinel",
			auth("    enabled: true\n") + "deployment: {enabled: true}\nnetworkPolicy: {enabled: true, callers: [], metricsScrapers: []}\n", nil},
		{"vmafx", vmafxChart, "vmafx", goodVmafx + "networkPolicy: {enabled: true, callers: [], metricsScrapers: []}\n", []string{"grpc"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := renderChart(t, c.dir, c.release, c.release, c.values)
			if err != nil {
				t.Fatal(err)
			}
			nps := networkPolicies(t, out)
			if len(nps) == 0 {
				t.Fatal("no NetworkPolicy rendered")
			}
			for _, np := range nps {
				name := nestedString(np, "metadata", "name")
				spec, _ := np["spec"].(map[string]any)
				rules, _ := spec["ingress"].([]any)
				for _, r := range rules {
					rule, _ := r.(map[string]any)
					from, _ := rule["from"].([]any)
					if len(from) == 0 {
						t.Errorf("%s: a rule admits every source: %v", name, rule)
					}
					for _, p := range nestedSlice(rule, "ports") {
						port, _ := p.(map[string]any)
						if pn, _ := port["port"].(string); !containsString(c.open, pn) {
							t.Errorf("%s: port %v is admitted though no caller or scraper is listed: %v", name, port["port"], rule)
						}
					}
				}
			}
		})
	}
}

func nestedString(v map[string]any, path ...string) string {
	for _, k := range path[:len(path)-1] {
		v, _ = v[k].(map[string]any)
	}
	s, _ := v[path[len(path)-1]].(string)
	return s
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
