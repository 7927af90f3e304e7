package chart_test

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/callerauth/callerauth/internal/kit/charts"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

var (
	apiserver *kubeapi.Server
	pdpBin    string
)

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/pdp"}, func() (func(), error) {
		pdpBin = bins["pdp"]
		return nil, nil
	}, kubeapi.ForTests(&apiserver), buildImages)
}

// chartCase is a chart rendered with a set of values, applied in a
// namespace at a Pod Security level, and what the chart means to grant
// each of its ServiceAccounts ("verb group/resource").
type chartCase struct {
	name, chart, release, namespace, values string
	crds                                    []string // the chart's own crds/ files
	level                                   string   // the namespace's Pod Security level (docs/deploy.md)
	grants                                  map[string][]string
}

// Grants the charts mean to give.
var (
	tokenReview    = []string{"create authentication.k8s.io/tokenreviews"}
	boundObjects   = []string{"list /pods", "watch /pods", "list /serviceaccounts", "watch /serviceaccounts"}
	operatorGrants = []string{"get vmafx.callerauth.dev/vmafxjobs", "list vmafx.callerauth.dev/vmafxjobs", "watch vmafx.callerauth.dev/vmafxjobs",
		"update vmafx.callerauth.dev/vmafxjobs", "update vmafx.callerauth.dev/vmafxjobs/status", "create events.k8s.io/events", "patch events.k8s.io/events",
		"get coordination.k8s.io/leases", "create coordination.k8s.io/leases", "update coordination.k8s.io/leases", "create /events", "patch /events"}
	monitorsNone = map[string][]string{"csp-health-monitor": nil, "kubernetes-object-monitor": nil, "nvcre-certification-monitor": nil, "slurm-drain-monitor": nil, "health-events-analyzer": nil}
)

func with(m map[string][]string, more map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

// TestChartsApplyToARealAPIServer: each chart, with its default values and
// with values that turn every option on, renders to manifests the real
// kube-apiserver accepts by server-side apply with strict field validation
// — CRDs first, the Prometheus Operator's ServiceMonitor and
// PrometheusRule CRDs (generated from its Go module,
// test/testdata/crds/README.md) among them, so those objects are
// validated too. A field the API does not know, a wrong type, an invalid
// projected-token volume or RBAC rule fails, naming the object.
func TestChartsApplyToARealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, warned := warnedCluster(t)
	c.ApplyCRDs(ctx, t, "../testdata/crds/monitoring.coreos.com_servicemonitors.yaml", "../testdata/crds/monitoring.coreos.com_prometheusrules.yaml")
	monitoring := "serviceMonitor: {enabled: true, labels: {release: prometheus}}\nprometheusRule: {enabled: true}\ndashboard: {enabled: true}\n"
	pdpFull := examplePDPValues(t, set(true, "autoscaling", "enabled"), set(true, "caller", "watchBoundObjects"), set("30m", "caller", "reviewInterval"),
		set("https://pdp.example.com", "authzenBaseURL"), set(map[string]any{"enabled": true}, "serviceMonitor"),
		set(map[string]any{"enabled": true}, "prometheusRule"), set(map[string]any{"enabled": true}, "dashboard"))
	pgURL := "postgres://connector@db.example:5432/events?sslmode=verify-full&sslrootcert=/etc/platform-connector/postgres-ca/ca.crt"
	connectorFull := auth("    enabled: true\n    apiServerIssuer: https://kubernetes.default.svc.cluster.local\n") +
		"daemonset:\n  watchBoundObjects: true\n" +
		"deployment:\n  enabled: true\n  replicas: 3\n  watchBoundObjects: true\n  postgres:\n    url: '" + pgURL + "'\n    passwordSecret: {name: events-db}\n    caConfigMap: events-db-ca\n" +
		"monitors:\n  csp-health-monitor: {enabled: true, image: registry.example/monitor:1}\n  kubernetes-object-monitor: {enabled: true, image: registry.example/monitor:1}\n  nvcre-certification-monitor: {enabled: true, image: registry.example/monitor:1}\n  slurm-drain-monitor: {enabled: true, image: registry.example/monitor:1}\n  health-events-analyzer: {enabled: true, image: registry.example/monitor:1}\n" + monitoring
	vmafxPG := "postgres://vmafx@db.example:5432/vmafx?sslmode=verify-full&sslrootcert=/etc/vmafx/postgres-ca/ca.crt"
	vmafxFull := goodVmafx + "  mode: refresher\n  refresher: {tokenURL: 'https://idp.tenant-a.example/oauth2/token'}\n" +
		"controller:\n  replicas: 2\n  quotas:\n    tenants: [{tenant: tenant-a, maxPendingJobs: 5000, maxSubmissionsPerMinute: 1200}]\n  postgres:\n    url: '" + vmafxPG + "'\n    passwordSecret: {name: vmafx-db}\n    caConfigMap: vmafx-db-ca\n" + monitoring
	vmafxCRDs := []string{filepath.Join(vmafxChart, "crds", "vmafx.callerauth.dev_vmafxjobs.yaml")}
	deploymentRole := auth("    enabled: true\n") + "daemonset: {enabled: false}\ndeployment: {enabled: true}\n" +
		"monitors:\n  csp-health-monitor: {enabled: true, image: registry.example/monitor:1}\n"
	cases := []chartCase{
		{"pdp, default values", pdpChart, "flex-auth", "flex-auth", examplePDPValues(t), nil, restricted,
			map[string][]string{"flex-auth-pdp": tokenReview}},
		{"pdp, every option on", pdpChart, "flex-auth-full", "flex-auth-full", pdpFull, nil, restricted,
			map[string][]string{"flex-auth-full-pdp": append(tokenReview, boundObjects...)}},
		{"platform-connector, default values", chartDir, "nvsentinel", "nvsentinel", auth("    enabled: true\n"), nil, privileged,
			map[string][]string{"nvsentinel-platform-connector": tokenReview}},
		{"platform-connector, host directories prepared by the nodes", chartDir, "nvsentinel-hd", "nvsentinel-hd",
			auth("    enabled: true\n") + "daemonset: {prepareHostDirs: false}\n", nil, privileged,
			map[string][]string{"nvsentinel-hd-platform-connector": tokenReview}},
		{"platform-connector, deployment role and a monitor", chartDir, "nvsentinel-dep", "nvsentinel-dep", deploymentRole, nil, restricted,
			map[string][]string{"nvsentinel-dep-platform-connector-deployment": tokenReview, "csp-health-monitor": nil}},
		{"platform-connector, every option on", chartDir, "nvsentinel-full", "nvsentinel-full", connectorFull, nil, privileged,
			with(monitorsNone, map[string][]string{"nvsentinel-full-platform-connector": append(tokenReview, boundObjects...),
				"nvsentinel-full-platform-connector-deployment": append(tokenReview, boundObjects...)})},
		{"callerauth-proxy, allow lists", proxyChart, "metrics", "metrics", exampleProxyValues(t, set(map[string]any{"mode": "allow"}, "authorization")), nil, restricted,
			map[string][]string{"metrics-callerauth-proxy": tokenReview}},
		{"callerauth-proxy, every option on", proxyChart, "metrics-full", "metrics-full",
			exampleProxyValues(t, set(true, "caller", "watchBoundObjects"), set("metrics-ca", "upstreamCA", "configMap"), set(true, "upstreamHTTP2"),
				set("https://metrics-app.monitoring.svc:8443", "upstream")), nil, restricted,
			map[string][]string{"metrics-full-callerauth-proxy": append(append([]string{"create authorization.k8s.io/subjectaccessreviews"}, tokenReview...), boundObjects...)}},
		{"vmafx, default values", vmafxChart, "vmafx", "vmafx-system", goodVmafx, vmafxCRDs, privileged,
			map[string][]string{"vmafx-controller": nil, "vmafx-node": nil, "vmafx-operator": operatorGrants}},
		{"vmafx, no node", vmafxChart, "vmafx-nonode", "vmafx-nonode", goodVmafx + "node: {enabled: false}\n", vmafxCRDs, restricted,
			map[string][]string{"vmafx-nonode-controller": nil, "vmafx-nonode-operator": operatorGrants}},
		{"vmafx, every option on", vmafxChart, "vmafx-full", "vmafx-full", vmafxFull, vmafxCRDs, privileged,
			map[string][]string{"vmafx-full-controller": nil, "vmafx-full-node": nil, "vmafx-full-operator": operatorGrants}},
		// docs/deploy.md's split: the controller and the operator in a
		// restricted namespace, the node DaemonSet a release of its own in
		// a privileged one, calling that controller.
		{"vmafx, the control plane of a split", vmafxChart, "cp", "vmafx-cp", goodVmafx + "node: {enabled: false}\ncontroller: {nodeNamespaces: [vmafx-nodes]}\n", vmafxCRDs, restricted,
			map[string][]string{"cp-vmafx-controller": nil, "cp-vmafx-operator": operatorGrants}},
		{"vmafx, the nodes of a split", vmafxChart, "nodes", "vmafx-nodes", splitNodes, nil, privileged,
			map[string][]string{"nodes-vmafx-node": nil}},
	}
	for _, cc := range cases {
		t.Run(cc.name, func(t *testing.T) {
			if len(cc.crds) > 0 {
				c.ApplyCRDs(ctx, t, cc.crds...)
			}
			out, err := renderChart(t, cc.chart, cc.release, cc.namespace, cc.values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			psNamespace(ctx, t, cc.namespace, cc.level)
			names := make([]string, 0, len(out))
			for n := range out {
				if strings.HasSuffix(n, ".yaml") {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			var docs []string
			for _, n := range names {
				docs = append(docs, out[n])
			}
			objs := charts.Objects(t, docs...)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
			}
			warned.take()
			for _, err := range c.Apply(ctx, cc.namespace, objs) {
				t.Error(err)
			}
			t.Logf("%d objects applied: %v", len(objs), kinds)
			checkPodSecurity(ctx, t, cc, objs, warned.take())
			checkGrants(ctx, t, cc, objs)
			if cc.name == "pdp, default values" {
				checkPrivilegedRefused(ctx, t, c, warned, cc.namespace, objs)
			}
		})
	}

	// The check can fail: an unknown field, a projected token shorter than
	// the API server allows, and an RBAC rule without verbs are each
	// refused, naming the object.
	out, err := renderChart(t, chartDir, "nvsentinel", "nvsentinel", auth("    enabled: true\n")+monitoring+"monitors:\n  csp-health-monitor: {enabled: true, image: registry.example/monitor:1}\n")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, d := range out {
		docs = append(docs, d)
	}
	for name, edit := range map[string]func(o *unstructured.Unstructured) bool{
		"an unknown field in a ServiceMonitor": func(o *unstructured.Unstructured) bool {
			return o.GetKind() == "ServiceMonitor" && unstructured.SetNestedField(o.Object, int64(1), "spec", "bogusField") == nil
		},
		"a projected token of 60 s": func(o *unstructured.Unstructured) bool {
			if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
				return false
			}
			vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
			for _, v := range vols {
				for _, src := range nestedSlice(v, "projected", "sources") {
					if tok, ok := src.(map[string]any)["serviceAccountToken"].(map[string]any); ok {
						tok["expirationSeconds"] = int64(60)
						_ = unstructured.SetNestedSlice(o.Object, vols, "spec", "template", "spec", "volumes")
						return true
					}
				}
			}
			return false
		},
		"an RBAC rule without verbs": func(o *unstructured.Unstructured) bool {
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			if o.GetKind() != "ClusterRole" || len(rules) == 0 {
				return false
			}
			delete(rules[0].(map[string]any), "verbs")
			return unstructured.SetNestedSlice(o.Object, rules, "rules") == nil
		},
	} {
		var hit *unstructured.Unstructured
		for _, o := range charts.Objects(t, docs...) {
			if edit(o) {
				hit = o
				break
			}
		}
		if hit == nil {
			t.Errorf("%s: no object to edit", name)
			continue
		}
		errs := c.Apply(ctx, "nvsentinel", []*unstructured.Unstructured{hit})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), hit.GetName()) {
			t.Errorf("%s: %v; want one error naming %s", name, errs, hit.GetName())
		} else {
			t.Logf("%s: refused: %v", name, errs[0])
		}
	}
}

// nestedSlice is the slice at path in a JSON object — itself, not a copy
// (unstructured.NestedSlice copies) — nil when absent.
func nestedSlice(v any, path ...string) []any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	s, _ := v.([]any)
	return s
}
