package cluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestScratchStart(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.Import(ctx, "/tmp/imgs/pdp.tar"); err != nil {
		t.Fatal(err)
	}
	_, err = c.API.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "ghcr.io/callerauth/pdp:0.1.0", Args: []string{"--help"}, ImagePullPolicy: corev1.PullNever}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = waitFor(ctx, time.Minute, func() error {
		p, err := c.API.Client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return nil
		}
		return context.DeadlineExceeded
	})
	t.Log(c.Readout(ctx))
	if err != nil {
		t.Fatal(err)
	}
}
