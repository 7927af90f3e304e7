package cluster_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/kit/cluster"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// TestRotationByTheKubelet: a client sending through credentials, its
// token file the one the kubelet projects into a pod, calls the connector
// without a break while the kubelet writes new tokens into the volume
// (the atomic ..data swap), twice. The kubelet renews a token at 80 % of
// its lifetime, and a projected token lives 600 s at the least (the API
// server refuses shorter): eight minutes a rotation. The test makes the
// kubelet renew at once by restarting it, its token cache being in
// memory: the new token and the swap are the kubelet's own.
func TestRotationByTheKubelet(t *testing.T) {
	readoutOnFailure(t)
	ctx := context.Background()
	socket, socketDir := connectorInstalled(ctx, t)
	pod := createPod(ctx, t, agentPod("rotating", socketDir, &corev1.Container{Name: "pause", Image: cluster.SandboxImage, ImagePullPolicy: corev1.PullNever}))
	if err := poll(ctx, time.Minute, func() error { return podPhase(ctx, pod, corev1.PodRunning) }); err != nil {
		t.Fatal(err)
	}
	file := node.ProjectedFile(string(pod.UID), tokenVolume, "token")
	readProjected(t, pod) // written
	p, err := connector.NewPublisher(credentials.Config{Address: socket, TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	var calls, failed atomic.Int64
	var mu sync.Mutex
	var failures []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := p.Publish(cctx, &pcv1.HealthEvent{Version: 1, Agent: "test-cluster", ComponentClass: "GPU", CheckName: "Rotation", Message: "across rotations"})
			cancel()
			calls.Add(1)
			if err != nil {
				failed.Add(1)
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			}
		}
	})
	tokens := []string{mustRead(t, file)}
	for rotation := 1; rotation <= 2; rotation++ {
		if err := node.RestartKubelet(ctx); err != nil {
			t.Fatal(err)
		}
		before := calls.Load()
		err := poll(ctx, 3*time.Minute, func() error {
			if tok := mustRead(t, file); tok != tokens[len(tokens)-1] {
				tokens = append(tokens, tok)
				return nil
			}
			return errNotYet
		})
		if err != nil {
			t.Fatalf("rotation %d: the kubelet wrote no new token: %v", rotation, err)
		}
		// Calls with the new token.
		if err := poll(ctx, 30*time.Second, func() error {
			if calls.Load() < before+20 {
				return errNotYet
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("rotation %d: a new token in the volume; %d calls so far, %d failed", rotation, calls.Load(), failed.Load())
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed across two rotations: %v", failed.Load(), calls.Load(), failures)
	}
}

var errNotYet = os.ErrDeadlineExceeded

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
