// Package charts renders this repository's Helm charts as helm template
// does and applies the result to a Kubernetes API server by server-side
// apply with strict field validation: shared by the chart tests and the
// tests that run a service with its chart's permissions.
package charts

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

// Render renders the chart in dir as release name in namespace, with
// values given as YAML, as helm template does: template file name →
// rendered text.
func Render(dir, name, namespace, values string) (map[string]string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		return nil, err
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// Cluster applies manifests to the real kube-apiserver by server-side
// apply with strict field validation: an unknown field, a wrong type or an
// invalid object is an error naming it.
type Cluster struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewCluster connects to the API server cfg names.
func NewCluster(t testing.TB, cfg *rest.Config) *Cluster {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// Objects splits rendered YAML documents into objects, skipping empty
// ones (a template that rendered nothing).
func Objects(t testing.TB, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range docs {
		for _, part := range strings.Split("\n"+d, "\n---") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(part), &m); err != nil {
				t.Fatalf("a rendered document is not YAML: %v\n%s", err, part)
			}
			if len(m) == 0 {
				continue
			}
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// Apply server-side applies each object (in namespace where namespaced)
// with strict field validation and returns the errors, each naming its
// object.
func (c *Cluster) Apply(ctx context.Context, namespace string, objs []*unstructured.Unstructured) []error {
	var errs []error
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		name := fmt.Sprintf("%s %s", gvk.Kind, o.GetName())
		mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			c.mapper.Reset() // a CRD applied since the last discovery
			mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		data, err := o.MarshalJSON()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		var r dynamic.ResourceInterface = c.dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = namespace
			}
			r = c.dyn.Resource(mapping.Resource).Namespace(ns)
		}
		force := true
		if _, err := r.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "chart-test", Force: &force, FieldValidation: "Strict"}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errs
}

// ApplyCRDs applies CRD files and waits until each is established.
func (c *Cluster) ApplyCRDs(ctx context.Context, t testing.TB, files ...string) {
	t.Helper()
	var docs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	crds := Objects(t, docs...)
	for _, err := range c.Apply(ctx, "", crds) {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, crd := range crds {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got, err := c.dyn.Resource(gvr).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err == nil && established(got) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established: %v", crd.GetName(), err)
			}
		}
	}
	c.mapper.Reset()
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// Unused lists what the Roles and ClusterRoles among objs grant that no
// request in reqs used, as "verb group/resource" (group "" is core): the
// grants a least-privilege chart should drop or justify.
func Unused(objs []*unstructured.Unstructured, reqs []kubeapi.Request) []string {
	used := map[string]bool{}
	for _, r := range reqs {
		res := r.Resource
		if r.Subresource != "" {
			res += "/" + r.Subresource
		}
		used[r.Verb+" "+r.APIGroup+"/"+res] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, rule := range rules {
			m, _ := rule.(map[string]any)
			for _, g := range stringList(m["apiGroups"]) {
				for _, res := range stringList(m["resources"]) {
					for _, v := range stringList(m["verbs"]) {
						k := v + " " + g + "/" + res
						if !used[k] && !seen[k] {
							seen[k] = true
							out = append(out, k)
						}
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func stringList(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
