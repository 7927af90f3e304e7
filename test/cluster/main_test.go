// Package cluster_test runs the charts on a real node: a cluster of one
// node started on this machine (internal/kit/cluster: the kubelet,
// containerd and runc, kube-apiserver, scheduler, controller-manager and
// kube-proxy), every image make images builds loaded into its containerd,
// each chart installed from those images into a namespace of the Pod
// Security level docs/deploy.md names, and the seeds' scenarios run with
// tokens the kubelet projected. A test that fails prints what runs where
// (nodes, pods, Events, container logs).
package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/cluster"
	"github.com/callerauth/callerauth/internal/tools/images"
)

var (
	node  *cluster.Cluster
	built = map[string]images.Image{}
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) (code int) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "test/cluster: a node needs root (network namespaces, mounts, cgroups); make test runs as root in CI")
		return 1
	}
	dir, err := os.MkdirTemp("", "callerauth-cluster-images-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	imgs, err := images.Make("../..", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err = cluster.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var stopOnce sync.Once
	stop := func() (err error) {
		stopOnce.Do(func() { err = node.Stop() })
		return err
	}
	defer func() {
		// Everything it started goes with it, or the run fails.
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}()
	// A run cancelled (a CI job stopped: SIGTERM; Ctrl-C) stops the
	// cluster before it exits: no kubelet, pod or mount is left behind.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "test/cluster: %s: stopping the cluster\n", s)
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}()
	for _, im := range imgs {
		if err := node.Import(ctx, im.Tarballs[0]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		built[im.Name] = im
	}
	return m.Run()
}

// readoutOnFailure prints what runs where when t fails.
func readoutOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Log("what runs where:\n" + node.Readout(ctx))
		}
	})
}
