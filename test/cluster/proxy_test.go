package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/callerauth/callerauth/internal/kit/cluster"
)

// TestProxySidecarRBAC: callerauth-proxy as a sidecar in front of a plain
// HTTP application (the chart's sidecar form, docs/proxy.md#deploying),
// its RBAC decided by the real API server: a caller whose ServiceAccount
// is granted get on services/proxy of the application goes through, with
// its identity passed on; another is refused rbac_denied. Each calls from
// its pod, through the application's Service, with the token the kubelet
// projects into it.
func TestProxySidecarRBAC(t *testing.T) {
	readoutOnFailure(t)
	ctx := context.Background()
	const ns, callers, audience = "monitoring", "callers", "metrics-app.monitoring.svc"
	namespace(ctx, t, ns, "restricted")
	ca := servingSecret(ctx, t, ns, "metrics-proxy-tls", "metrics-app", audience)
	cs := node.API.Client
	install(ctx, t, "callerauth-proxy", "metrics", ns, "restricted", `deployment: {enabled: false}
upstream: http://127.0.0.1:8080
tls: {secretName: metrics-proxy-tls}
caller: {audience: `+audience+`}
authorization:
  mode: rbac
  configFile: |
    authorization:
      resourceAttributes: {namespace: monitoring, apiVersion: v1, resource: services, subresource: proxy, name: metrics-app}
ignorePaths: [/healthz]
`)
	// The application and the proxy beside it, as docs/proxy.md's sidecar.
	labels := map[string]string{"app": "metrics-app"}
	restricted := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "metrics-app"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ServiceAccountName: "metrics-callerauth-proxy",
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{
				{Name: "app", Image: cluster.EchoImage, ImagePullPolicy: corev1.PullNever, Args: []string{"--listen=127.0.0.1:8080"}, SecurityContext: restricted},
				{Name: "callerauth-proxy", Image: built["callerauth-proxy"].Ref, ImagePullPolicy: corev1.PullNever, SecurityContext: restricted,
					Args: []string{"--listen=:8443", "--tls-cert-file=/etc/callerauth-proxy/tls/tls.crt", "--tls-key-file=/etc/callerauth-proxy/tls/tls.key",
						"--metrics-listen=:9090", "--upstream=http://127.0.0.1:8080", "--caller-audience=" + audience,
						"--authorization=rbac", "--config-file=/etc/callerauth-proxy/config/config-file.yaml", "--ignore-paths=/healthz"},
					Ports:          []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "metrics", ContainerPort: 9090}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("metrics")}}},
					VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/callerauth-proxy/tls", ReadOnly: true},
						{Name: "config", MountPath: "/etc/callerauth-proxy/config", ReadOnly: true}}},
			},
			Volumes: []corev1.Volume{
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "metrics-proxy-tls"}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "metrics-callerauth-proxy-config"}}}},
			},
		}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "metrics-app"}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Name: "https", Port: 8443, TargetPort: intstr.FromString("https")}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(ctx, t, ns, "Deployment", "metrics-app")

	// Two callers, one granted get on services/proxy of metrics-app.
	namespace(ctx, t, callers, "restricted")
	for _, sa := range []string{"granted", "other"} {
		if _, err := cs.CoreV1().ServiceAccounts(callers).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "metrics-app-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"services/proxy"}, ResourceNames: []string{"metrics-app"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-app-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "metrics-app-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "granted", Namespace: callers}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configMap(ctx, t, callers, "fetch-ca", map[string]string{"ca.crt": string(ca.PEM)})
	url := fmt.Sprintf("https://%s:8443/metrics", svc.Spec.ClusterIP)
	for _, c := range []struct {
		sa     string
		status int
		want   string
	}{{"granted", http.StatusOK, "system:serviceaccount:callers:granted"}, {"other", http.StatusForbidden, "rbac_denied"}} {
		code, body := fromPod(ctx, t, callers, call{name: c.sa, serviceAccount: c.sa, audience: audience, method: "GET", url: url, serverName: audience})
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %d %s", c.sa, code, body)
		}
		field := "user"
		if c.status != http.StatusOK {
			field = "reason"
		}
		if code != c.status || got[field] != c.want {
			t.Errorf("%s through the sidecar: %d %v; want %d and %s %q", c.sa, code, got, c.status, field, c.want)
		}
	}
}

// tokenPod is a restricted pod of serviceAccount holding a token the
// kubelet projects for audience in volume (600 s), doing nothing else.
func tokenPod(name, ns, serviceAccount, volume, audience string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		ServiceAccountName: serviceAccount, AutomountServiceAccountToken: ptr.To(false),
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "pause", Image: cluster.SandboxImage, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			VolumeMounts: []corev1.VolumeMount{{Name: volume, MountPath: "/var/run/secrets/tokens", ReadOnly: true}}}},
		Volumes: []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: audience, ExpirationSeconds: ptr.To[int64](600), Path: "token"}}}}}}},
	}}
}
