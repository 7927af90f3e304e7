// Package cluster starts a Kubernetes cluster of one node on this machine
// for the tests (test/cluster) and for a person (make cluster): the API
// server and etcd of package kubeapi, kube-controller-manager,
// kube-scheduler, kube-proxy and a kubelet, all of k8s.io/kubernetes at
// kubeapi.Version, with containerd (built from its Go module), Debian's
// runc and Debian's CNI plugins (bridge, host-local, portmap, loopback).
//
// Everything runs in a network namespace of its own, made for the cluster
// and deleted with it: the API server and the kubelet listen on an address
// of that namespace, reached from the machine through a veth pair; pods
// get addresses on a bridge inside it; kube-proxy's rules live there. The
// namespace has no route out, so nothing a pod sends leaves the machine.
// The kubelet's cgroups sit under a root of the cluster's own, its files
// and containerd's under one directory; Stop removes them all.
//
// The machine has cgroups v1: the kubelet is told failCgroupV1: false.
// There is no registry to pull from: images are imported into containerd
// (Import), the pod sandbox image too (built from ./pause), a plain HTTP
// application for the tests' pods (./echo) and an HTTPS caller (./fetch).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/internal/kit/proc"
)

// ContainerdVersion is the containerd make builds (test/tools/containerd).
const ContainerdVersion = "v2.4.2"

// NodeName is the node's name.
const NodeName = "node-1"

// PodCIDR is the pods' addresses, on the bridge inside the namespace.
const PodCIDR = "10.244.0.0/24"

// ServiceCIDR is the Services' cluster IPs (the API server's range).
const ServiceCIDR = "10.0.0.0/24"

// SandboxImage is the pause image the cluster builds and imports.
const SandboxImage = "callerauth.test/pause:1"

// EchoImage is a plain HTTP upstream the cluster builds and imports (./echo).
const EchoImage = "callerauth.test/echo:1"

// FetchImage is an HTTPS caller for pods the cluster builds and imports
// (./fetch): one request with a token file, the answer in its log.
const FetchImage = "callerauth.test/fetch:1"

// Static tokens of the cluster's own components, each its own user as
// kubeadm makes them (the default ClusterRoleBindings name these users).
var componentTokens = map[string]string{
	"kubelet":                 `node-token,system:node:` + NodeName + `,node-uid,"system:nodes"`,
	"kube-controller-manager": `controller-manager-token,system:kube-controller-manager,kcm-uid,""`,
	"kube-scheduler":          `scheduler-token,system:kube-scheduler,scheduler-uid,""`,
	"kube-proxy":              `proxy-token,system:kube-proxy,proxy-uid,""`,
}

// Cluster is a running cluster of one node.
type Cluster struct {
	// API is the API server; its Client is the cluster's admin.
	API *kubeapi.Server
	// Dir holds every component's files and logs.
	Dir string
	// NetNS is the path of the cluster's network namespace.
	NetNS string
	// Kubeconfig is an admin kubeconfig file for kubectl.
	Kubeconfig string
	// Address is the node's address (the API server's host).
	Address string

	name       string // of the namespace
	cgroupRoot string
	kubeBin    string
	ctrBin     string
	procs      []*proc.Process
	kubelet    *proc.Process
	kubeletCmd []string
}

// BinDir is where make builds containerd, its runc shim and ctr.
func BinDir() (string, error) {
	kube, err := kubeapi.BinDir()
	if err != nil {
		return "", err
	}
	if d := os.Getenv("CALLERAUTH_CONTAINERD_BIN"); d != "" {
		return d, nil
	}
	return filepath.Join(filepath.Dir(filepath.Dir(kube)), "containerd", ContainerdVersion), nil
}

// Start starts the cluster and waits until its node is Ready. Stop it with
// Stop, which also runs when Start fails.
func Start(ctx context.Context) (_ *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("cluster: a node needs root (network namespaces, mounts, cgroups)")
	}
	kubeBin, err := kubeapi.BinDir()
	if err != nil {
		return nil, err
	}
	ctrBin, err := BinDir()
	if err != nil {
		return nil, err
	}
	for _, b := range []string{filepath.Join(kubeBin, "kubelet"), filepath.Join(kubeBin, "kube-controller-manager"), filepath.Join(kubeBin, "kube-scheduler"),
		filepath.Join(kubeBin, "kube-proxy"), filepath.Join(ctrBin, "containerd"), filepath.Join(ctrBin, "containerd-shim-runc-v2"), filepath.Join(ctrBin, "ctr")} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("cluster: %s not found: `make test` builds it (make node-tools)", b)
		}
	}
	for _, b := range []string{"runc", "nsenter", "ip", "iptables"} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("cluster: %s not found: `make test` installs it (make node-tools)", b)
		}
	}
	if _, err := os.Stat(cniBin); err != nil {
		return nil, fmt.Errorf("cluster: no CNI plugins in %s: `make test` installs Debian's containernetworking-plugins (make node-tools)", cniBin)
	}
	dir, err := os.MkdirTemp("", "callerauth-cluster-")
	if err != nil {
		return nil, err
	}
	// Others may pass through (not list): the hostPath directories of
	// HostDir are under it, and pods not running as root reach them.
	if err := os.Chmod(dir, 0o711); err != nil { //nolint:gosec // traversal only, as a node's / is
		return nil, err
	}
	if err := traversable(filepath.Dir(dir)); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	id := rand.IntN(250) + 1 //nolint:gosec // a subnet for the veth pair, not a secret
	c := &Cluster{Dir: dir, name: fmt.Sprintf("callerauth-%d-%d", os.Getpid(), id), kubeBin: kubeBin, ctrBin: ctrBin,
		cgroupRoot: "/" + filepath.Base(dir)}
	c.NetNS = "/run/netns/" + c.name
	c.Address = fmt.Sprintf("10.213.%d.2", id)
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.logTails())
			if serr := c.Stop(); serr != nil {
				err = fmt.Errorf("%w\n%w", err, serr)
			}
		}
	}()
	if err := c.network(id); err != nil {
		return nil, err
	}
	var tokens []string
	for _, t := range componentTokens {
		tokens = append(tokens, t)
	}
	kubeletClient, err := c.kubeletClientCert()
	if err != nil {
		return nil, err
	}
	// The kubelet by its address: the node's name resolves nowhere (no
	// cluster DNS, nothing in /etc/hosts).
	extra := append(kubeletClient, "--kubelet-preferred-address-types=InternalIP")
	c.API, err = kubeapi.StartWith(ctx, kubeapi.Options{Address: c.Address, NetNS: c.NetNS, Tokens: tokens, Extra: extra})
	if err != nil {
		return nil, err
	}
	if err := c.writeFiles(); err != nil {
		return nil, err
	}
	if err := c.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := c.startControlPlane(); err != nil {
		return nil, err
	}
	if err := c.makeCgroupRoot(); err != nil {
		return nil, err
	}
	if err := c.startKubelet(); err != nil {
		return nil, err
	}
	if err := c.waitUp(ctx, 2*time.Minute, func() error { return c.nodeReady(ctx) }); err != nil {
		return nil, fmt.Errorf("cluster: node %s did not become Ready: %w", NodeName, err)
	}
	// The controller-manager at work: the default ServiceAccount and the
	// root CA a projected token volume carries.
	if err := c.waitUp(ctx, time.Minute, func() error {
		if _, err := c.API.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := c.API.Client.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("cluster: the controller-manager made no default ServiceAccount and root CA: %w", err)
	}
	return c, nil
}

// traversable fails when a user other than root cannot pass through dir
// or one above it: a pod running as such a user could not reach its
// hostPath volumes under the cluster's directory.
func traversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("cluster: %s (mode %04o) would keep pods that do not run as root from their hostPath volumes under it: "+
				"set TMPDIR to a directory every user may pass through (chmod o+x)", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// HostDir is where a hostPath of path (absolute, as a chart names it) is
// on this node: under the cluster's directory, never the machine's own
// path, so a chart's hostPath directories go with the cluster.
func (c *Cluster) HostDir(path string) string { return c.path("host", path) }

// ProjectedFile is the path on this node of file in the projected volume
// of a pod (its uid): what the kubelet wrote there, a service-account
// token say, read as the pod reads it (through the ..data link).
func (c *Cluster) ProjectedFile(podUID, volume, file string) string {
	return c.path("kubelet", "pods", podUID, "volumes", "kubernetes.io~projected", volume, file)
}

// kubeletClientCert makes the certificate the API server presents to the
// kubelet (logs, exec), signed by a CA the kubelet trusts, and returns the
// API server's flags for it.
func (c *Cluster) kubeletClientCert() ([]string, error) {
	ca, err := pki.NewCA("callerauth-cluster kubelet clients")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.IssueClient("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	if _, err := ca.WriteCA(c.path("kubelet-client-ca.crt")); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"kubelet-client.crt": certPEM, "kubelet-client.key": keyPEM} {
		if err := os.WriteFile(c.path(name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return []string{"--kubelet-client-certificate=" + c.path("kubelet-client.crt"), "--kubelet-client-key=" + c.path("kubelet-client.key")}, nil
}

// network makes the namespace, the veth pair to it and the routes.
func (c *Cluster) network(id int) error {
	host := fmt.Sprintf("cav%d-%d", id, os.Getpid()%10000)
	for _, args := range [][]string{
		{"netns", "add", c.name},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", c.name},
		{"addr", "add", fmt.Sprintf("10.213.%d.1/30", id), "dev", host},
		{"link", "set", host, "up"},
		{"-n", c.name, "link", "set", "lo", "up"},
		{"-n", c.name, "addr", "add", c.Address + "/30", "dev", "eth0"},
		{"-n", c.name, "link", "set", "eth0", "up"},
		// No default route: nothing leaves. Cluster IPs are rewritten by
		// kube-proxy before they are routed, but a connection from the
		// node itself needs a route to start from.
		{"-n", c.name, "route", "add", ServiceCIDR, "dev", "eth0"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil { //nolint:gosec // our own arguments
			return fmt.Errorf("cluster: ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command("nsenter", "--net="+c.NetNS, "--", "sysctl", "-w", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1").CombinedOutput(); err != nil { //nolint:gosec // the namespace this cluster made
		return fmt.Errorf("cluster: sysctl in the namespace: %w: %s", err, out)
	}
	return nil
}

// run starts a component in the namespace, its output in DIR/NAME.log.
func (c *Cluster) run(bin string, args ...string) (*proc.Process, error) {
	logf, err := os.OpenFile(filepath.Join(c.Dir, filepath.Base(bin)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(proc.Spec{Bin: bin, Args: args, Output: logf, Group: true, NetNS: c.NetNS, StopTimeout: 20 * time.Second})
	if err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.procs = append(c.procs, p)
	return p, nil
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.Dir}, parts...)...)
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	if _, err := c.run(filepath.Join(c.ctrBin, "containerd"), "--config", c.path("containerd.toml")); err != nil {
		return err
	}
	if err := c.waitUp(ctx, time.Minute, func() error { return c.ctr(ctx, "version") }); err != nil {
		return fmt.Errorf("cluster: containerd did not answer: %w", err)
	}
	for _, im := range []struct{ pkg, ref string }{{"pause", SandboxImage}, {"echo", EchoImage}, {"fetch", FetchImage}} {
		tarball, err := c.testImage(ctx, im.pkg, im.ref, "65535:65535")
		if err != nil {
			return err
		}
		if err := c.Import(ctx, tarball); err != nil {
			return err
		}
	}
	return nil
}

// ctr runs ctr against the cluster's containerd, in its Kubernetes
// namespace.
func (c *Cluster) ctr(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.ctrBin, "ctr"), append([]string{"--address", c.path("containerd", "containerd.sock"), "--namespace", "k8s.io"}, args...)...) //nolint:gosec // our own tool
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Import loads an image tarball (docker save or OCI archive) into the
// node's containerd, where the kubelet finds it without pulling.
func (c *Cluster) Import(ctx context.Context, tarball string) error {
	if err := c.ctr(ctx, "images", "import", "--no-unpack=false", "--local", tarball); err != nil {
		return fmt.Errorf("cluster: importing %s: %w", tarball, err)
	}
	return nil
}

func (c *Cluster) startControlPlane() error {
	sa := filepath.Join(c.API.Dir, "sa.key")
	if _, err := c.run(filepath.Join(c.kubeBin, "kube-controller-manager"),
		"--kubeconfig="+c.path("kube-controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+c.path("kube-controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+c.path("kube-controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
		"--use-service-account-credentials=true", "--service-account-private-key-file="+sa,
		"--root-ca-file="+c.API.CAFile, "--cluster-cidr="+PodCIDR, "--service-cluster-ip-range="+ServiceCIDR,
		"--controllers=*,-nodeipam"); err != nil {
		return err
	}
	if _, err := c.run(filepath.Join(c.kubeBin, "kube-scheduler"),
		"--kubeconfig="+c.path("kube-scheduler.kubeconfig"),
		"--authentication-kubeconfig="+c.path("kube-scheduler.kubeconfig"),
		"--authorization-kubeconfig="+c.path("kube-scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false"); err != nil {
		return err
	}
	_, err := c.run(filepath.Join(c.kubeBin, "kube-proxy"), "--config="+c.path("kube-proxy.yaml"))
	return err
}

// makeCgroupRoot makes the kubelet's cgroup root in every hierarchy (the
// kubelet wants it there); a cpuset gets its parent's CPUs and memory.
func (c *Cluster) makeCgroupRoot() error {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		d := filepath.Join(h, c.cgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // a cgroup, as the kubelet makes them
			return fmt.Errorf("cluster: the kubelet's cgroup root: %w", err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil { //nolint:gosec // a cgroup file
					return fmt.Errorf("cluster: %s of the kubelet's cgroup root: %w", f, err)
				}
			}
		}
	}
	return nil
}

func (c *Cluster) startKubelet() error {
	c.kubeletCmd = []string{filepath.Join(c.kubeBin, "kubelet"),
		"--config=" + c.path("kubelet.yaml"), "--kubeconfig=" + c.path("kubelet.kubeconfig"),
		"--root-dir=" + c.path("kubelet"), "--cert-dir=" + c.path("kubelet", "pki"),
		"--hostname-override=" + NodeName, "--node-ip=" + c.Address}
	p, err := c.run(c.kubeletCmd[0], c.kubeletCmd[1:]...)
	c.kubelet = p
	return err
}

// RestartKubelet stops the kubelet and starts it again, its pods left
// running: its token cache is gone, so it requests every pod's token again
// and writes the new one into the pod's volume.
func (c *Cluster) RestartKubelet(ctx context.Context) error {
	if err := c.kubelet.Stop(); err != nil && !isSignalled(err) {
		return fmt.Errorf("cluster: stopping the kubelet: %w", err)
	}
	for i, p := range c.procs {
		if p == c.kubelet {
			c.procs = append(c.procs[:i], c.procs[i+1:]...)
			break
		}
	}
	if err := c.startKubelet(); err != nil {
		return err
	}
	return c.waitUp(ctx, 2*time.Minute, func() error { return c.nodeReady(ctx) })
}

func isSignalled(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled() || ws.ExitStatus() == 143
		}
	}
	return false
}

func (c *Cluster) nodeReady(ctx context.Context) error {
	n, err := c.API.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s: Ready %s: %s", NodeName, cond.Status, cond.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", NodeName)
}

// Stop stops every component, the pods' containers with them, and removes
// the mounts, the cgroups, the namespace and the directory; it returns
// what it could not remove.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.kubelet != nil {
		_ = c.kubelet.Stop()
	}
	c.killContainers(ctx)
	for i := len(c.procs) - 1; i >= 0; i-- {
		_ = c.procs[i].Stop()
	}
	c.procs = nil
	if c.API != nil {
		c.API.Stop()
	}
	c.killCgroups()
	unmountUnder(c.Dir)
	if c.name != "" {
		_ = exec.Command("ip", "netns", "delete", c.name).Run() //nolint:gosec // the namespace this cluster made
	}
	var left []string
	if _, err := os.Stat(c.NetNS); c.name != "" && err == nil {
		left = append(left, "the network namespace "+c.NetNS)
	}
	if points := mountsUnder(c.Dir); len(points) > 0 {
		left = append(left, fmt.Sprintf("%d mounts under %s", len(points), c.Dir))
	}
	if cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", c.cgroupRoot)); c.cgroupRoot != "" && len(cgroups) > 0 {
		left = append(left, fmt.Sprintf("the cgroup %s in %d hierarchies", c.cgroupRoot, len(cgroups)))
	}
	if os.Getenv("CALLERAUTH_KEEP_CLUSTER") == "" && len(left) == 0 {
		if err := os.RemoveAll(c.Dir); err != nil {
			left = append(left, err.Error())
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("cluster: stopped, but left %s", strings.Join(left, ", "))
	}
	return nil
}

// alive fails when a component has exited.
func (c *Cluster) alive() error {
	for _, p := range c.procs {
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited: %w", p.Name, p.Err())
		default:
		}
	}
	return nil
}

// waitUp waits for f while every component runs.
func (c *Cluster) waitUp(ctx context.Context, limit time.Duration, f func() error) error {
	return waitFor(ctx, limit, func() error {
		if err := c.alive(); err != nil {
			return &permanent{err}
		}
		return f()
	})
}

func waitFor(ctx context.Context, limit time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		if last = f(); last == nil {
			return nil
		}
		var stop *permanent
		if errors.As(last, &stop) {
			return stop.err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// permanent ends a wait at once.
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
