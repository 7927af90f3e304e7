package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/charts"
)

// namespace makes ns at a Pod Security level (enforced, as docs/deploy.md
// asks).
func namespace(ctx context.Context, t *testing.T, ns, level string) {
	t.Helper()
	_, err := node.API.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// install renders the chart deploy/charts/<chart> as release in ns (made
// at level), applies it, and waits until each of its Deployments and
// DaemonSets is Ready.
func install(ctx context.Context, t *testing.T, chart, release, ns, level, values string) {
	t.Helper()
	namespace(ctx, t, ns, level)
	docs, err := charts.Render(filepath.Join("../../deploy/charts", chart), release, ns, values)
	if err != nil {
		t.Fatalf("rendering %s: %v", chart, err)
	}
	var texts []string
	for file, d := range docs {
		if !strings.HasSuffix(file, "NOTES.txt") { // shown to a person, as helm does
			texts = append(texts, d)
		}
	}
	objs := charts.Objects(t, texts...)
	ownGrantsOnly(t, ns, objs)
	apply := charts.NewCluster(t, node.API.REST)
	// The chart's crds/ first, as helm install applies them.
	if crds, _ := filepath.Glob(filepath.Join("../../deploy/charts", chart, "crds", "*.yaml")); len(crds) > 0 {
		apply.ApplyCRDs(ctx, t, crds...)
	}
	for _, err := range apply.Apply(ctx, ns, objs) {
		t.Errorf("installing %s: %v", chart, err)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" || o.GetKind() == "DaemonSet" {
			waitReady(ctx, t, ns, o.GetKind(), o.GetName())
		}
	}
}

// secret makes a Secret of ns.
func secret(ctx context.Context, t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	if _, err := node.API.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// servingSecret makes a CA of its own and the Secret name in ns holding a
// serving pair it signed for hosts (tls.crt, tls.key) and the CA (ca.crt);
// it returns the CA, which the service's callers trust.
func servingSecret(ctx context.Context, t *testing.T, ns, name string, hosts ...string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("test-cluster " + name)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := ca.Issue(hosts[0], hosts...)
	if err != nil {
		t.Fatal(err)
	}
	secret(ctx, t, ns, name, map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.PEM})
	return ca
}

// ownGrantsOnly checks, when t ends, that no ServiceAccount of the chart
// was refused anything by the API server (its audit log): each workload
// runs as its own account, and its chart's RBAC is all it needs.
func ownGrantsOnly(t *testing.T, ns string, objs []*unstructured.Unstructured) {
	t.Helper()
	t.Cleanup(func() {
		seen, accounts := 0, 0
		defer func() {
			// Not a vacuous check: the chart's workloads called the API
			// server as their accounts, and the log has it.
			if accounts > 0 && seen == 0 && !t.Failed() {
				t.Errorf("the audit log has no request of the chart's %d ServiceAccounts in %s", accounts, ns)
			}
		}()
		for _, o := range objs {
			if o.GetKind() != "ServiceAccount" {
				continue
			}
			accounts++
			user := "system:serviceaccount:" + ns + ":" + o.GetName()
			reqs, err := node.API.Requests(user)
			if err != nil {
				t.Errorf("the audit log: %v", err)
				return
			}
			seen += len(reqs)
			for _, r := range reqs {
				if r.Code == 403 {
					t.Errorf("%s was refused %s %s/%s/%s in %q: its chart grants less than it does", user, r.Verb, r.APIGroup, r.Resource, r.Subresource, r.Namespace)
				}
			}
		}
	})
}

// waitReady waits up to three minutes for a Deployment's or DaemonSet's
// pods to be Ready at its current generation.
func waitReady(ctx context.Context, t *testing.T, ns, kind, name string) {
	t.Helper()
	apps := node.API.Client.AppsV1()
	err := poll(ctx, 3*time.Minute, func() error {
		switch kind {
		case "Deployment":
			d, err := apps.Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.ReadyReplicas != want || d.Status.Replicas != want {
				return fmt.Errorf("deployment %s/%s: %d of %d ready, %d updated", ns, name, d.Status.ReadyReplicas, want, d.Status.UpdatedReplicas)
			}
		case "DaemonSet":
			d, err := apps.DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			want := d.Status.DesiredNumberScheduled
			if d.Status.ObservedGeneration < d.Generation || want == 0 || d.Status.UpdatedNumberScheduled != want || d.Status.NumberReady != want {
				return fmt.Errorf("daemonset %s/%s: %d of %d ready, %d updated", ns, name, d.Status.NumberReady, want, d.Status.UpdatedNumberScheduled)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// poll calls f every 250 ms until it succeeds or limit passes, or f
// returns a *stop.
func poll(ctx context.Context, limit time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		var s *stop
		if errors.As(err, &s) {
			return s.error
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", limit, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
