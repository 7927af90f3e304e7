package cluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

// cniBin is where Debian's containernetworking-plugins puts the plugins.
const cniBin = "/usr/lib/cni"

func (c *Cluster) writeFiles() error {
	api := c.API.URL
	files := map[string]string{
		"containerd.toml": fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[6]q

[plugins."io.containerd.cri.v1.runtime"]
  # This machine withholds CAP_SYS_RESOURCE even from root: no process may
  # lower its oom_score_adj, so containers keep containerd's (0).
  restrict_oom_score_adj = true
  # Pods' network namespaces under the state directory, not /run/netns:
  # they go with the cluster.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %[10]q
        Root = %[7]q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[8]q]
    conf_dir = %[9]q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, c.path("containerd", "root"), c.path("containerd", "state"), c.path("containerd", "containerd.sock"), c.path("containerd", "containerd.sock.ttrpc"),
			c.path("containerd", "opt"), SandboxImage, c.path("containerd", "runc"), cniBin, c.path("cni"), runtimeBin()),
		"cni/10-callerauth.conflist": fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "callerauth",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, c.path("cni-ipam"), PodCIDR),
		"kubelet.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[5]s}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[3]s
podLogsDir: %[4]s
resolvConf: ""
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
maxPods: 60
`, c.Address, c.cgroupRoot, c.path("containerd", "containerd.sock"), c.path("pod-logs"), c.path("kubelet-client-ca.crt")),
		"kube-proxy.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
mode: iptables
clusterCIDR: %[3]s
bindAddress: %[4]s
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.path("kube-proxy.kubeconfig"), NodeName, PodCIDR, c.Address),
	}
	for component, line := range componentTokens {
		files[component+".kubeconfig"] = kubeconfig(api, c.API.CAFile, strings.SplitN(line, ",", 2)[0])
	}
	files["admin.kubeconfig"] = kubeconfig(api, c.API.CAFile, kubeapi.AdminToken)
	c.Kubeconfig = c.path("admin.kubeconfig")
	for name, body := range files {
		p := c.path(name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func kubeconfig(server, caFile, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: callerauth
  cluster: {server: %q, certificate-authority: %q}
users:
- name: user
  user: {token: %q}
contexts:
- name: callerauth
  context: {cluster: callerauth, user: user}
current-context: callerauth
`, server, caFile, token)
}

// testImage builds the main package ./<pkg> of this directory into a
// one-file image (the binary as /<pkg>, its entrypoint, run as user) and
// writes it as a docker tarball named ref.
func (c *Cluster) testImage(ctx context.Context, pkg, ref, user string) (string, error) {
	bin := c.path("test-images", pkg, pkg)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".") //nolint:gosec // a path of this cluster's
	cmd.Dir, cmd.Env = filepath.Join(sourceDir(), pkg), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster: building the %s image's binary: %w: %s", pkg, err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: pkg, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return "", err
	}
	if _, err := tw.Write(b); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return "", err
	}
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/" + pkg}, User: user})
	if err != nil {
		return "", err
	}
	img, err = mutate.ConfigFile(img, withPlatform(img))
	if err != nil {
		return "", err
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", err
	}
	out := c.path("test-images", pkg+".tar")
	return out, tarball.WriteToFile(out, r, img)
}

func withPlatform(img v1.Image) *v1.ConfigFile {
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	return cf
}

// sourceDir is this package's directory in the repository, found from
// the working directory up (go test and go run both run inside it).
func sourceDir() string {
	wd, _ := os.Getwd()
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "internal", "kit", "cluster", "pause")); err == nil {
			return filepath.Join(d, "internal", "kit", "cluster")
		}
	}
	return filepath.Join(wd, "internal", "kit", "cluster")
}

// killContainers stops every pod's containers: a kubelet that stops leaves
// them running.
func (c *Cluster) killContainers(ctx context.Context) {
	if _, err := os.Stat(c.path("containerd", "containerd.sock")); err != nil {
		return
	}
	ids, err := c.ctrOutput(ctx, "tasks", "list", "--quiet")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(ids) {
		_ = c.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if out, err := c.ctrOutput(ctx, "tasks", "list", "--quiet"); err != nil || strings.TrimSpace(out) == "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range strings.Fields(ids) {
		_ = c.ctr(ctx, "tasks", "delete", "--force", id)
	}
}

func (c *Cluster) ctrOutput(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.ctrBin, "ctr"), append([]string{"--address", c.path("containerd", "containerd.sock"), "--namespace", "k8s.io"}, args...)...) //nolint:gosec // our own tool
	out, err := cmd.Output()
	return string(out), err
}

// killCgroups kills what is left in the kubelet's cgroups and removes
// them, deepest first, in every hierarchy.
func (c *Cluster) killCgroups() {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		root := filepath.Join(h, c.cgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, pid := range strings.Fields(string(b)) {
					var n int
					if _, err := fmt.Sscan(pid, &n); err == nil && n > 1 {
						_ = syscall.Kill(n, syscall.SIGKILL)
					}
				}
			}
		}
		for range 50 {
			left := 0
			for _, d := range dirs {
				if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
					left++
				}
			}
			if left == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// unmountUnder unmounts every mount under dir, deepest first (lazily: a
// mount still busy goes when its last user does).
func unmountUnder(dir string) {
	for _, p := range mountsUnder(dir) {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// mountsUnder lists the mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	if dir == "" {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points
}

// logTails is the end of each component's log, for an error.
func (c *Cluster) logTails() string {
	var b strings.Builder
	logs, _ := filepath.Glob(c.path("*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Base(l), data)
	}
	return b.String()
}

func runtimeBin() string {
	if b := os.Getenv("CALLERAUTH_NODE_RUNTIME"); b != "" {
		return b
	}
	return "runc"
}
