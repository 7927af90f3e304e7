package chart_test

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/callerauth/callerauth/internal/kit/charts"
)

// TestAChangedConfigMapReachesThePods: a helm upgrade that changes what a
// workload reads from a ConfigMap of its chart either rolls its pods (the
// pod template changes with the ConfigMap: a checksum annotation) or
// reaches a running pod because the service reloads that file — the
// ConfigMaps named reloaded below, each with the service's reload (the
// pdp's policy and registry, the vmafx controller's
// AuthenticationConfiguration). Otherwise an upgrade would report success
// while the pods go on with the old file.
func TestAChangedConfigMapReachesThePods(t *testing.T) {
	for _, tc := range []struct {
		name, chart, release, namespace string
		before, after                   string
		reloaded                        []string
	}{
		{"vmafx: the controller's address", vmafxChart, "vmafx", "vmafx-system", goodVmafx,
			goodVmafx + "controller: {address: 10.0.0.9:8443, serverName: vmafx-controller.vmafx-system.svc}\n", nil},
		{"vmafx: the tenants", vmafxChart, "vmafx", "vmafx-system", goodVmafx,
			strings.Replace(goodVmafx, "idp.tenant-b.example", "idp2.tenant-b.example", 1), []string{"vmafx-controller-authn"}},
		{"callerauth-proxy: --config-file", proxyChart, "metrics", "monitoring", exampleProxyValues(t),
			exampleProxyValues(t, set("authorization:\n  static: []\n", "authorization", "configFile")), nil},
		{"platform-connector: the auth config", chartDir, "nvsentinel", "nvsentinel", auth("    enabled: true\n"),
			auth("    enabled: true\n    mode: audit\n"), nil},
		{"pdp: the policy and the registry", pdpChart, "flex-auth", "flex-auth", examplePDPValues(t),
			examplePDPValues(t, set(`{"systems": {}}`, "registry", "json"), func(v map[string]any) {
				files := v["policy"].(map[string]any)["files"].(map[string]string)
				files["catalog.cedar"] += "\n// changed\n"
			}),
			[]string{"flex-auth-pdp-policy", "flex-auth-pdp-registry"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := objects(t, tc.chart, tc.release, tc.namespace, tc.before), objects(t, tc.chart, tc.release, tc.namespace, tc.after)
			changedMaps := 0
			for key, cm := range after {
				if cm.GetKind() != "ConfigMap" || reflect.DeepEqual(cm.Object["data"], before[key].Object["data"]) {
					continue
				}
				changedMaps++
				readers := 0
				for wkey, w := range after {
					if (w.GetKind() != "Deployment" && w.GetKind() != "DaemonSet") || !slices.Contains(mountedConfigMaps(w), cm.GetName()) {
						continue
					}
					readers++
					old, ok := before[wkey]
					if !ok {
						continue // a new workload starts with the new file
					}
					tmpl, _, _ := unstructured.NestedMap(w.Object, "spec", "template")
					oldTmpl, _, _ := unstructured.NestedMap(old.Object, "spec", "template")
					if reflect.DeepEqual(tmpl, oldTmpl) && !slices.Contains(tc.reloaded, cm.GetName()) {
						t.Errorf("ConfigMap %s changed but %s %s's pod template did not: its pods keep the old file", cm.GetName(), w.GetKind(), w.GetName())
					}
				}
				if readers == 0 {
					t.Errorf("ConfigMap %s changed and no workload of the chart mounts it", cm.GetName())
				}
			}
			if changedMaps == 0 {
				t.Fatalf("the change reached no ConfigMap: the case tests nothing")
			}
		})
	}
}

// objects renders a chart, its objects by kind/name.
func objects(t *testing.T, chart, release, namespace, values string) map[string]*unstructured.Unstructured {
	t.Helper()
	out, err := renderChart(t, chart, release, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, k := range slices.Sorted(maps.Keys(out)) {
		if !strings.HasSuffix(k, "NOTES.txt") {
			docs = append(docs, out[k])
		}
	}
	m := map[string]*unstructured.Unstructured{}
	for _, o := range charts.Objects(t, docs...) {
		m[o.GetKind()+"/"+o.GetName()] = o
	}
	return m
}

// mountedConfigMaps are the ConfigMaps a workload's pods mount, directly
// or in a projected volume.
func mountedConfigMaps(w *unstructured.Unstructured) []string {
	var names []string
	vols, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		vm, _ := v.(map[string]any)
		if n, ok, _ := unstructured.NestedString(vm, "configMap", "name"); ok {
			names = append(names, n)
		}
		srcs, _, _ := unstructured.NestedSlice(vm, "projected", "sources")
		for _, s := range srcs {
			sm, _ := s.(map[string]any)
			if n, ok, _ := unstructured.NestedString(sm, "configMap", "name"); ok {
				names = append(names, n)
			}
		}
	}
	return names
}
