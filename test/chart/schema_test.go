package chart_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// chartValues are each chart and values it renders with.
func chartValues(t *testing.T) []struct{ name, dir, values string } {
	return []struct{ name, dir, values string }{
		{"pdp", pdpChart, examplePDPValues(t)},
		{"callerauth-proxy", proxyChart, exampleProxyValues(t)},
		{"platform-connector", chartDir, auth("    enabled: true\n")},
		{"vmafx", vmafxChart, goodVmafx},
	}
}

// TestValuesSchemas: every chart has a values.schema.json that names
// each key of its values.yaml, and refuses what the chart would silently
// ignore — an unknown key, at the top or nested (a misspelt
// caller.audiance), and a value of the wrong type — when it renders.
func TestValuesSchemas(t *testing.T) {
	for _, c := range chartValues(t) {
		t.Run(c.name, func(t *testing.T) {
			var schema map[string]any
			if err := json.Unmarshal(mustReadFile(t, filepath.Join(c.dir, "values.schema.json")), &schema); err != nil {
				t.Fatal(err)
			}
			var defaults map[string]any
			if err := yaml.Unmarshal(mustReadFile(t, filepath.Join(c.dir, "values.yaml")), &defaults); err != nil {
				t.Fatal(err)
			}
			// Every key of values.yaml is in the schema (down to where the
			// schema lets an object be free-form: resources, labels, a
			// security context).
			var walk func(v map[string]any, s map[string]any, path string)
			walk = func(v map[string]any, s map[string]any, path string) {
				props, _ := s["properties"].(map[string]any)
				if props == nil {
					return // free-form
				}
				for k, x := range v {
					sub, ok := props[k].(map[string]any)
					if !ok {
						t.Errorf("%s.%s is in values.yaml, not in values.schema.json", path, k)
						continue
					}
					if m, ok := x.(map[string]any); ok {
						walk(m, sub, path+"."+k)
					}
				}
				for k, sub := range props {
					noDefault := strings.HasPrefix(fmt.Sprint(sub.(map[string]any)["$comment"]), "no default")
					if _, ok := v[k]; !ok && k != "global" && !noDefault {
						t.Errorf("%s.%s is in values.schema.json, not in values.yaml (every value has its default written there)", path, k)
					}
				}
			}
			walk(defaults, schema, "")
			if _, err := renderChart(t, c.dir, "r", "ns", c.values); err != nil {
				t.Fatalf("the chart's own values: %v", err)
			}
			for _, bad := range []struct{ what, values, want string }{
				{"an unknown key", c.values + "\nnoSuchKey: 1\n", "noSuchKey"},
				{"an unknown nested key", c.values + "\nimage: {tagg: v1}\n", "tagg"},
				{"a wrong type", c.values + "\nimage: {tag: [v1]}\n", "tag"},
				{"a value not among those allowed", c.values + "\nimage: {pullPolicy: Sometimes}\n", "pullPolicy"},
			} {
				_, err := renderChart(t, c.dir, "r", "ns", bad.values)
				if err == nil || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("%s: %v; want a refusal naming %s", bad.what, err, bad.want)
				}
			}
			if c.name == "platform-connector" {
				// A socket path over 107 bytes cannot be bound.
				long := c.values + "\ndaemonset: {socketDir: /" + strings.Repeat("d", 83) + "}\n"
				if _, err := renderChart(t, c.dir, "r", "ns", long); err == nil || !strings.Contains(err.Error(), "socketDir") {
					t.Errorf("a socketDir of 84 bytes: %v; want a refusal naming socketDir", err)
				}
			}
		})
	}
}
