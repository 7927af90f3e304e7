// Command dev-cluster (make cluster) starts a Kubernetes cluster of one
// node on this machine — the kubelet, containerd and runc of
// internal/kit/cluster, in a network namespace of its own — loads the
// images make images builds into it, prints how to reach it, and runs
// until interrupted; then it stops everything it started. It writes the
// admin kubeconfig to <state>/kubeconfig, its pid to <state>/pid and the
// shell settings to reach it to <state>/env (KUBECONFIG, PATH with kubectl
// and helm, CLUSTER_HOST: where the node's hostPath volumes are,
// CLUSTER_ISSUERS: the tenants' dev issuers), and removes them on the way
// out.
//
// A tenant's identity provider for seed 000 is a dev issuer of its own,
// served over HTTPS on the node's address, where pods reach it: its state
// directory is <state>/issuers/<tenant> (the issuer file holds its URL,
// ca.crt the CA its certificate is signed by), and callerauth token mint
// --state-dir mints its tokens.
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

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/callerauth/callerauth/internal/kit/cluster"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/internal/tools/images"
)

func main() {
	state := flag.String("state", ".cache/cluster", "where the kubeconfig is written while the cluster runs")
	withImages := flag.Bool("images", true, "build the images (make images, tagged as the charts name them) and load them into the node")
	issuers := flag.String("issuers", "tenant-a,tenant-b", "tenants (comma-separated) each given a dev issuer on the node's address; empty: none")
	flag.Parse()
	if err := run(*state, *withImages, splitList(*issuers)); err != nil {
		fmt.Fprintln(os.Stderr, "dev-cluster:", err)
		os.Exit(1)
	}
}

func run(state string, withImages bool, tenants []string) error {
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
	issuersDir := filepath.Join(state, "issuers")
	closeIssuers, err := serveIssuers(c, issuersDir, tenants)
	if err != nil {
		return err
	}
	defer closeIssuers()
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	bin, err := kubeapi.BinDir()
	if err != nil {
		return err
	}
	env := fmt.Sprintf("export KUBECONFIG=%s\nexport PATH=%s:$PATH\nexport CLUSTER_HOST=%s\nexport CLUSTER_ISSUERS=%s\n", kubeconfig, bin, c.HostDir("/"), issuersDir)
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

Tenants' dev issuers (CLUSTER_ISSUERS=%s), for seed 000:
%s
Images on the node: %s
Stop it with Ctrl-C (or kill %d, also in %s): every process, mount,
cgroup, the network namespace and $CLUSTER_HOST go with it.
`, cluster.NodeName, c.Address, c.API.URL, envFile, issuersDir, issuerLines(issuersDir, tenants), loaded, os.Getpid(), pidFile)
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

// serveIssuers opens a dev issuer for each tenant in dir/<tenant> (made
// afresh: an issuer's URL is fixed when its directory is made, and the
// port is new each time) and serves it over HTTPS on the node's address.
// The returned function stops them and removes dir.
func serveIssuers(c *cluster.Cluster, dir string, tenants []string) (func(), error) {
	var closers []func()
	stop := func() {
		for _, f := range closers {
			f()
		}
		_ = os.RemoveAll(dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for _, tenant := range tenants {
		if err := validTenant(tenant); err != nil {
			stop()
			return nil, err
		}
		_, closeIssuer, err := c.ServeIssuer(filepath.Join(dir, tenant))
		if err != nil {
			stop()
			return nil, fmt.Errorf("tenant %s's dev issuer: %w", tenant, err)
		}
		closers = append(closers, closeIssuer)
	}
	return stop, nil
}

// validTenant refuses a name that is not one path element of a directory
// (a DNS label, as the vmafx chart's tenants are).
func validTenant(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("--issuers: tenant %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

func issuerLines(dir string, tenants []string) string {
	if len(tenants) == 0 {
		return "  none (--issuers)\n"
	}
	var b strings.Builder
	for _, t := range tenants {
		url, _ := os.ReadFile(filepath.Join(dir, t, "issuer"))
		fmt.Fprintf(&b, "  %s  %s  (callerauth token mint --state-dir $CLUSTER_ISSUERS/%s --subject ... --audience ...)\n", t, strings.TrimSpace(string(url)), t)
	}
	return b.String()
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
