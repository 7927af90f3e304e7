package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/callerauth/callerauth/internal/kit/cluster"
)

// call is one HTTPS request a pod makes (the fetch image), and the
// credential it presents.
type call struct {
	name, serviceAccount string
	// audience: a token the kubelet projects for it; secret: instead, a
	// token the test wrote into a Secret (key token); neither: none.
	audience, secret string
	method, url      string
	serverName       string
	body             string // a key of the ConfigMap "fetch-bodies", or none
}

// fromPod runs c in a restricted pod of ns, trusting the CA of the
// ConfigMap "fetch-ca" (ca.crt), and returns the status and body it got,
// read from the pod's log.
func fromPod(ctx context.Context, t *testing.T, ns string, c call) (int, []byte) {
	t.Helper()
	args := []string{"--url", c.url, "--method", c.method, "--ca-file", "/etc/fetch/ca/ca.crt", "--server-name", c.serverName}
	mounts := []corev1.VolumeMount{{Name: "ca", MountPath: "/etc/fetch/ca", ReadOnly: true}}
	volumes := []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "fetch-ca"}}}}}
	switch {
	case c.secret != "":
		volumes = append(volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: c.secret}}})
	case c.audience != "":
		volumes = append(volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: c.audience, ExpirationSeconds: ptr.To[int64](600), Path: "token"}}}}}})
	}
	if c.secret != "" || c.audience != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: "token", MountPath: "/var/run/secrets/tokens", ReadOnly: true})
		args = append(args, "--token-file", "/var/run/secrets/tokens/token")
	}
	if c.body != "" {
		volumes = append(volumes, corev1.Volume{Name: "body", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "fetch-bodies"}}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "body", MountPath: "/etc/fetch/body", ReadOnly: true})
		args = append(args, "--body-file", "/etc/fetch/body/"+c.body)
	}
	pod := createPod(ctx, t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: ns}, Spec: corev1.PodSpec{
		ServiceAccountName: c.serviceAccount, AutomountServiceAccountToken: ptr.To(false), RestartPolicy: corev1.RestartPolicyNever,
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			FSGroup: ptr.To[int64](65532), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "fetch", Image: cluster.FetchImage, ImagePullPolicy: corev1.PullNever, Args: args, VolumeMounts: mounts,
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		Volumes: volumes,
	}})
	logs := func() []byte {
		b, _ := node.API.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "fetch"}).DoRaw(ctx)
		return b
	}
	if err := poll(ctx, 2*time.Minute, func() error {
		p, err := node.API.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			return &stop{fmt.Errorf("pod %s failed: %s", pod.Name, logs())}
		}
		return fmt.Errorf("pod %s is %s", pod.Name, p.Status.Phase)
	}); err != nil {
		t.Fatal(err)
	}
	out := logs()
	first, rest, _ := bytes.Cut(out, []byte("\n"))
	code, err := strconv.Atoi(string(first))
	if err != nil {
		t.Fatalf("pod %s printed %q", pod.Name, out)
	}
	return code, bytes.TrimSpace(rest)
}

// stop ends a poll at once.
type stop struct{ error }

// configMap makes (or replaces) a ConfigMap of ns.
func configMap(ctx context.Context, t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
	_, err := node.API.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = node.API.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}
