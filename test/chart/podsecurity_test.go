package chart_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/callerauth/callerauth/internal/kit/charts"
)

// The Pod Security levels of docs/deploy.md: every workload meets
// "restricted"; a DaemonSet that mounts a hostPath (the connector's socket
// role, the vmafx node) needs a namespace at "privileged" — "baseline"
// forbids hostPath too — and fails no other restricted control but the
// one exception the docs name (the connector's host-dirs init container).
const (
	restricted = "restricted"
	privileged = "privileged"
)

// psNamespace creates (or relabels) namespace with enforce, audit and
// warn all at level.
func psNamespace(ctx context.Context, t *testing.T, name, level string) {
	t.Helper()
	labels := map[string]string{
		psapi.EnforceLevelLabel: level, psapi.EnforceVersionLabel: "latest",
		psapi.AuditLevelLabel: level, psapi.WarnLevelLabel: level,
	}
	ns, err := apiserver.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = apiserver.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	} else if err == nil {
		for k, v := range labels {
			metav1.SetMetaDataLabel(&ns.ObjectMeta, k, v)
		}
		_, err = apiserver.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// warnings collects the API server's warnings (Pod Security's "would
// violate" among them) per request.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// warnedCluster is a Cluster whose requests' warnings land in w.
func warnedCluster(t *testing.T) (*charts.Cluster, *warnings) {
	w := &warnings{}
	cfg := rest.CopyConfig(apiserver.REST)
	cfg.WarningHandler = w
	return charts.NewCluster(t, cfg), w
}

// podTemplates are the pod templates of the workloads among objs, by
// "Kind/name".
func podTemplates(t *testing.T, objs []*unstructured.Unstructured) map[string]*corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]*corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "DaemonSet", "StatefulSet", "Job":
		default:
			continue
		}
		raw, ok, _ := unstructured.NestedMap(o.Object, "spec", "template")
		if !ok {
			t.Fatalf("%s/%s has no pod template", o.GetKind(), o.GetName())
		}
		var tmpl corev1.PodTemplateSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
			t.Fatal(err)
		}
		out[o.GetKind()+"/"+o.GetName()] = &tmpl
	}
	return out
}

// restrictedFailures evaluates a pod template with the Pod Security
// admission's own checks at restricted (latest): forbidden reason → details.
func restrictedFailures(t *testing.T, tmpl *corev1.PodTemplateSpec) map[string]string {
	t.Helper()
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range ev.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec) {
		if !r.Allowed {
			out[r.ForbiddenReason] = r.ForbiddenDetail
		}
	}
	return out
}

// dryRunPod creates tmpl as a Pod in namespace by server-side dry run:
// Pod Security's enforce applies to Pods, not to workload templates.
func dryRunPod(ctx context.Context, namespace, name string, tmpl *corev1.PodTemplateSpec) error {
	pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	pod.Name, pod.Namespace = strings.ToLower(strings.ReplaceAll(name, "/", "-")), namespace
	_, err := apiserver.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// checkPodSecurity: applying the chart's objects gave no Pod Security
// warning; every pod template, created as a Pod (dry run), is admitted at
// the namespace's level; and evaluated at restricted, it fails nothing —
// or, for a hostPath DaemonSet, nothing but the hostPath and the exception
// the docs name.
func checkPodSecurity(ctx context.Context, t *testing.T, cc chartCase, objs []*unstructured.Unstructured, warned []string) {
	t.Helper()
	for _, w := range warned {
		if strings.Contains(w, "PodSecurity") {
			t.Errorf("applying the chart warned: %s", w)
		}
	}
	tmpls := podTemplates(t, objs)
	if len(tmpls) == 0 {
		t.Fatal("no workload rendered")
	}
	for name, tmpl := range tmpls {
		if err := dryRunPod(ctx, cc.namespace, name, tmpl); err != nil {
			t.Errorf("%s as a Pod in a %s namespace: %v", name, cc.level, err)
		}
		got := restrictedFailures(t, tmpl)
		hostPath := false
		for _, v := range tmpl.Spec.Volumes {
			hostPath = hostPath || v.HostPath != nil
		}
		allowed := map[string]bool{}
		if hostPath {
			if !strings.HasPrefix(name, "DaemonSet/") || cc.level != privileged {
				t.Errorf("%s mounts a hostPath: only a DaemonSet in a privileged namespace may", name)
			}
			allowed["hostPath volumes"], allowed["restricted volume types"] = true, true
			if len(got) == 0 {
				t.Errorf("%s: a hostPath and no restricted failure: the check cannot see", name)
			}
		}
		for reason, detail := range got {
			switch {
			case reason == "restricted volume types" && allowed[reason] && !regexp.MustCompile(`^volumes? .* uses? restricted volume type "hostPath"$`).MatchString(detail):
				t.Errorf("%s: a restricted volume type other than hostPath: %s", name, detail)
			case allowed[reason]:
			case slices.Contains([]string{"runAsNonRoot != true", "runAsUser=0", "unrestricted capabilities"}, reason) &&
				strings.Contains(detail, `"host-dirs"`) && !strings.Contains(strings.ReplaceAll(detail, `"host-dirs"`, ""), `container "`):
				// The connector's init container (daemonset.prepareHostDirs),
				// and no other container.
			default:
				t.Errorf("%s fails Pod Security restricted: %s (%s)", name, reason, detail)
			}
		}
		if len(got) > 0 {
			t.Logf("%s: restricted fails only %v", name, keys(got))
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkPrivilegedRefused: the check can fail — a pod template given a
// privileged container is refused as a Pod, naming it, and warns on apply.
func checkPrivilegedRefused(ctx context.Context, t *testing.T, c *charts.Cluster, w *warnings, namespace string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		o = o.DeepCopy()
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		sc := containers[0].(map[string]any)["securityContext"].(map[string]any)
		sc["privileged"] = true
		sc["allowPrivilegeEscalation"] = true
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		w.take()
		for _, err := range c.Apply(ctx, namespace, []*unstructured.Unstructured{o}) {
			t.Fatal(err)
		}
		warned := strings.Join(w.take(), "\n")
		if !strings.Contains(warned, "privileged") {
			t.Errorf("a privileged container applied without a Pod Security warning: %q", warned)
		}
		tmpl := podTemplates(t, []*unstructured.Unstructured{o})["Deployment/"+o.GetName()]
		err := dryRunPod(ctx, namespace, "privileged-"+o.GetName(), tmpl)
		if err == nil || !strings.Contains(err.Error(), "privileged-"+o.GetName()) || !strings.Contains(err.Error(), "privileged") {
			t.Errorf("a privileged pod: %v; want a refusal naming it", err)
		} else {
			t.Logf("refused: %v", err)
		}
		// Put the chart's own back.
		orig := objs[slices.IndexFunc(objs, func(x *unstructured.Unstructured) bool {
			return x.GetKind() == "Deployment" && x.GetName() == o.GetName()
		})]
		for _, err := range c.Apply(ctx, namespace, []*unstructured.Unstructured{orig}) {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no Deployment to make privileged")
}

// grantsOf asks the API server, as the service account, what it may do in
// its namespace (SelfSubjectRulesReview): sorted "verb group/resource"
// lines.
func grantsOf(ctx context.Context, t *testing.T, namespace, sa string) []string {
	t.Helper()
	tok, err := apiserver.Token(ctx, namespace, sa, nil, 600, nil)
	if err != nil {
		t.Fatalf("a token for %s/%s: %v", namespace, sa, err)
	}
	cs, err := kubernetes.NewForConfig(apiserver.RESTAs(tok))
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.Incomplete {
		t.Fatalf("%s: the rules review is incomplete: %s", sa, res.Status.EvaluationError)
	}
	var out []string
	for _, r := range res.Status.ResourceRules {
		for _, v := range r.Verbs {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					line := fmt.Sprintf("%s %s/%s", v, g, res)
					if len(r.ResourceNames) > 0 {
						line += " " + strings.Join(r.ResourceNames, ",")
					}
					out = append(out, line)
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// checkGrants: each ServiceAccount the chart creates may do exactly what
// the case says the chart means to grant it, as the API server answers it.
func checkGrants(ctx context.Context, t *testing.T, cc chartCase, objs []*unstructured.Unstructured) {
	t.Helper()
	// What any service account may do here (the cluster's defaults for
	// every user and every service account) is not the chart's grant: ask
	// as one the chart does not know, and take its answer away.
	base := "baseline-" + strconv.Itoa(int(time.Now().UnixNano()%1e6))
	if _, err := apiserver.ServiceAccount(ctx, cc.namespace, base); err != nil {
		t.Fatal(err)
	}
	baseline := grantsOf(ctx, t, cc.namespace, base)
	for _, sa := range named(objs, "ServiceAccount") {
		want, ok := cc.grants[sa.GetName()]
		if !ok {
			t.Errorf("ServiceAccount %s: the case does not say what it should be granted", sa.GetName())
			continue
		}
		got := slices.DeleteFunc(grantsOf(ctx, t, cc.namespace, sa.GetName()), func(g string) bool { return slices.Contains(baseline, g) })
		want = slices.Clone(want)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("ServiceAccount %s may %q; the chart means %q", sa.GetName(), got, want)
		}
	}
	for name := range cc.grants {
		if len(named(objs, "ServiceAccount")) > 0 && !slices.ContainsFunc(named(objs, "ServiceAccount"), func(o *unstructured.Unstructured) bool { return o.GetName() == name }) {
			t.Errorf("the case names ServiceAccount %s, which the chart does not create", name)
		}
	}
}
