// Command dev-cluster (make cluster) starts a Kubernetes cluster of one
// node on this machine — the kubelet, containerd and runc of
// internal/kit/cluster, in a network namespace of its own — loads the
// images make images builds into it, prints how to reach it, and runs
// until interrupted; then it stops everything it started. It writes the
// admin kubeconfig to <state>/kubeconfig, its pid to <state>/pid and the
// shell settings to reach it to <state>/env (KUBECONFIG, PATH with kubectl
// and helm, CLUSTER_HOST: where the node's hostPath volumes are), and
// removes them on the way out.
// It needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/callerauth/callerauth/internal/kit/cluster"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/internal/tools/images"
)

func main() {
	state := flag.String("state", ".cache/cluster", "where the kubeconfig is written while the cluster runs")
	withImages := flag.Bool("images", true, "build the images (make images, tagged as the charts name them) and load them into the node")
	flag.Parse()
	if err := run(*state, *withImages); err != nil {
		fmt.Fprintln(os.Stderr, "dev-cluster:", err)
		os.Exit(1)
	}
}

func run(state string, withImages bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	state, err := filepath.Abs(state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "starting a cluster of one node (the kubelet, containerd, runc; kube-apiserver, scheduler, controller-manager, kube-proxy)...")
	c, err := cluster.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if serr := c.Stop(); serr != nil {
			fmt.Fprintln(os.Stderr, "dev-cluster:", serr)
		}
	}()
	kubeconfig, pidFile, envFile := filepath.Join(state, "kubeconfig"), filepath.Join(state, "pid"), filepath.Join(state, "env")
	for _, f := range []string{kubeconfig, pidFile, envFile} {
		defer os.Remove(f)
	}
	loaded := "none"
	if withImages {
		tag, err := chartTag()
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "building the images and loading them into the node...")
		built, err := images.Build(ctx, images.Options{Root: ".", Out: filepath.Join(c.Dir, "images"), Registry: "ghcr.io/callerauth", Tag: tag, BuildVCS: "false"})
		if err != nil {
			return err
		}
		var refs []string
		for _, im := range built {
			if err := c.Import(ctx, im.Tarballs[0]); err != nil {
				return err
			}
			refs = append(refs, im.Ref)
		}
		loaded = strings.Join(refs, " ")
	}
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	bin, err := kubeapi.BinDir()
	if err != nil {
		return err
	}
	env := fmt.Sprintf("export KUBECONFIG=%s\nexport PATH=%s:$PATH\nexport CLUSTER_HOST=%s\n", kubeconfig, bin, c.HostDir("/"))
	// The env file last: a script waits for it, then finds the rest.
	for _, f := range []struct {
		path string
		data []byte
	}{{pidFile, []byte(fmt.Sprintln(os.Getpid()))}, {kubeconfig, b}, {envFile, []byte(env)}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return err
		}
	}
	fmt.Printf(`The cluster is up: node %s at %s, API server %s.
Reach it with kubectl and helm (built beside the kubelet):

  . %s     # KUBECONFIG, PATH, and CLUSTER_HOST: the node's / for hostPath volumes
  kubectl get nodes

Images on the node: %s
Stop it with Ctrl-C (or kill %d, also in %s): every process, mount,
cgroup, the network namespace and $CLUSTER_HOST go with it.
`, cluster.NodeName, c.Address, c.API.URL, envFile, loaded, os.Getpid(), pidFile)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "stopping the cluster...")
	return nil
}

// chartTag is the tag the charts name their images by: their appVersion,
// the VERSION file's.
func chartTag() (string, error) {
	b, err := os.ReadFile("VERSION")
	if err != nil {
		return "", fmt.Errorf("the charts' image tag: %w (run from the repository's root)", err)
	}
	return strings.TrimSpace(string(b)), nil
}
