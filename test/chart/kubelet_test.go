package chart_test

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What the kubelet would do for one pod, as files: each volume laid out
// with the owners and modes the kubelet gives it (k8s.io/kubernetes
// pkg/volume: a Secret, ConfigMap or projected volume is written by the
// atomic writer — files under a timestamped directory, reached through
// the ..data link — owned by root with the volume's mode; a projected
// service-account token is 0600; with fsGroup every file and directory
// goes to that group, files gaining r (read-only volumes) or rw
// (emptyDir), directories also x and setgid; an emptyDir is 0777; a
// DirectoryOrCreate hostPath is created by root with 0755).

// podFiles are a pod's inputs: the Secrets its volumes name (by name, then
// key), the rendered objects (its ConfigMaps), the token of its service
// account (when one is mounted) and the host's root for hostPath volumes.
type podFiles struct {
	secrets   map[string]map[string][]byte
	objs      []*unstructured.Unstructured
	namespace string
	saToken   func(audience string, seconds int64) string
	caCert    []byte
	hostRoot  string
}

const (
	roMask   = 0o440
	rwMask   = 0o660
	execMask = 0o110
)

// layVolume writes volume v of the pod under dir and returns the host
// directory to bind-mount.
func (pf *podFiles) layVolume(t *testing.T, dir string, v corev1.Volume, fsGroup *int64) string {
	t.Helper()
	host := filepath.Join(dir, v.Name)
	switch {
	case v.Secret != nil:
		data, ok := pf.secrets[v.Secret.SecretName]
		if !ok {
			t.Fatalf("volume %s: no Secret %s given to the test", v.Name, v.Secret.SecretName)
		}
		files := project(t, v.Name, data, v.Secret.Items, mode(v.Secret.DefaultMode, 0o644))
		atomicWrite(t, host, files)
		ownership(t, host, fsGroup, true)
	case v.ConfigMap != nil:
		files := project(t, v.Name, pf.configMap(t, v.ConfigMap.Name), v.ConfigMap.Items, mode(v.ConfigMap.DefaultMode, 0o644))
		atomicWrite(t, host, files)
		ownership(t, host, fsGroup, true)
	case v.Projected != nil:
		files := map[string]fileData{}
		def := mode(v.Projected.DefaultMode, 0o644)
		for _, src := range v.Projected.Sources {
			switch {
			case src.ServiceAccountToken != nil:
				m := def
				if fsGroup != nil {
					m = 0o600 // the kubelet's rule; ownership then adds the group's read
				}
				files[src.ServiceAccountToken.Path] = fileData{[]byte(pf.saToken(src.ServiceAccountToken.Audience, ptrOr(src.ServiceAccountToken.ExpirationSeconds, 3600))), m}
			case src.ConfigMap != nil && src.ConfigMap.Name == "kube-root-ca.crt":
				files["ca.crt"] = fileData{pf.caCert, def}
			case src.ConfigMap != nil:
				for k, f := range project(t, v.Name, pf.configMap(t, src.ConfigMap.Name), src.ConfigMap.Items, def) {
					files[k] = f
				}
			case src.Secret != nil:
				for k, f := range project(t, v.Name, pf.secrets[src.Secret.Name], src.Secret.Items, def) {
					files[k] = f
				}
			case src.DownwardAPI != nil:
				for _, it := range src.DownwardAPI.Items {
					if it.FieldRef == nil || it.FieldRef.FieldPath != "metadata.namespace" {
						t.Fatalf("volume %s: downward API item %+v is not laid out by this test", v.Name, it)
					}
					files[it.Path] = fileData{[]byte(pf.namespace), def}
				}
			default:
				t.Fatalf("volume %s: projected source %+v is not laid out by this test", v.Name, src)
			}
		}
		atomicWrite(t, host, files)
		ownership(t, host, fsGroup, true)
	case v.EmptyDir != nil:
		if err := os.MkdirAll(host, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(host, 0o777); err != nil {
			t.Fatal(err)
		}
		ownership(t, host, fsGroup, false)
	case v.HostPath != nil:
		host = filepath.Join(pf.hostRoot, v.HostPath.Path)
		typ := corev1.HostPathUnset
		if v.HostPath.Type != nil {
			typ = *v.HostPath.Type
		}
		switch typ {
		case corev1.HostPathDirectoryOrCreate:
			if _, err := os.Stat(host); os.IsNotExist(err) {
				if err := os.MkdirAll(host, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(host, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		case corev1.HostPathDirectory:
			if fi, err := os.Stat(host); err != nil || !fi.IsDir() {
				t.Fatalf("hostPath %s (type Directory) does not exist: %v", v.HostPath.Path, err)
			}
		default:
			t.Fatalf("hostPath %s: type %q is not laid out by this test", v.HostPath.Path, typ)
		}
		// fsGroup never applies to a hostPath.
	default:
		t.Fatalf("volume %s: its kind is not laid out by this test", v.Name)
	}
	return host
}

type fileData struct {
	body []byte
	mode os.FileMode
}

func mode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m)
}

func ptrOr(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

// project picks a volume's files from data: every key, or the items.
func project(t *testing.T, vol string, data map[string][]byte, items []corev1.KeyToPath, def os.FileMode) map[string]fileData {
	t.Helper()
	out := map[string]fileData{}
	if len(items) == 0 {
		for k, b := range data {
			out[k] = fileData{b, def}
		}
		return out
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			t.Fatalf("volume %s: key %s missing", vol, it.Key)
		}
		out[it.Path] = fileData{b, mode(it.Mode, def)}
	}
	return out
}

// atomicWrite lays files out as the kubelet's atomic writer does: in a
// timestamped directory, reached through ..data, each name a link into it.
func atomicWrite(t *testing.T, dir string, files map[string]fileData) {
	t.Helper()
	ts := "..2026_12_02_00_00_00.000000001"
	for name, f := range files {
		p := filepath.Join(dir, ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.body, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		top := strings.Split(name, "/")[0]
		if _, err := os.Lstat(filepath.Join(dir, top)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", top), filepath.Join(dir, top)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// ownership is the kubelet's SetVolumeOwnership for fsGroup.
func ownership(t *testing.T, dir string, fsGroup *int64, readOnly bool) {
	t.Helper()
	if fsGroup == nil {
		return
	}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, int(*fsGroup)); err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		mask := os.FileMode(rwMask)
		if readOnly {
			mask = roMask
		}
		if fi.IsDir() {
			mask |= os.ModeSetgid | execMask
		}
		return os.Chmod(p, fi.Mode()|mask)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (pf *podFiles) configMap(t *testing.T, name string) map[string][]byte {
	t.Helper()
	for _, o := range pf.objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == name {
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			out := map[string][]byte{}
			for k, v := range data {
				out[k] = []byte(v)
			}
			return out
		}
	}
	t.Fatalf("the chart renders no ConfigMap %s", name)
	return nil
}

// extractImage flattens the image in the OCI layout dir into rootfs, with
// the owners and modes its layers give, and returns its configuration.
func extractImage(t *testing.T, layoutDir, rootfs string) *v1.ConfigFile {
	t.Helper()
	p, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("%s: %v manifests, %v", layoutDir, len(m.Manifests), err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(rootfs, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
				_, err = io.Copy(f, tr)
				_ = f.Close()
			}
		default:
			t.Fatalf("%s: %s: an entry of type %c", layoutDir, h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Lchown(dst, h.Uid, h.Gid)
		}
		if err == nil {
			err = os.Chmod(dst, os.FileMode(h.Mode&0o777)|tarModeBits(h.Mode))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf
}

func tarModeBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	return out
}

// runtimeDefaultDenied are the system calls the container runtimes'
// RuntimeDefault seccomp profile refuses (containerd's and Docker's
// default profile allows a list that leaves these out): the profile runc
// is given here refuses them with EPERM.
var runtimeDefaultDenied = []string{
	"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module", "finit_module",
	"get_kernel_syms", "get_mempolicy", "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load",
	"keyctl", "lookup_dcookie", "mbind", "mount", "move_pages", "name_to_handle_at", "nfsservctl", "open_by_handle_at",
	"perf_event_open", "pivot_root", "process_vm_readv", "process_vm_writev", "ptrace", "query_module", "quotactl",
	"reboot", "request_key", "set_mempolicy", "setns", "settimeofday", "swapon", "swapoff", "sysfs", "_sysctl",
	"umount", "umount2", "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
}

// capNames maps Kubernetes capability names to the kernel's.
func capNames(cs []corev1.Capability) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, "CAP_"+strings.ToUpper(string(c)))
	}
	return out
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerSpec is the OCI runtime configuration of container c of the
// pod, as the kubelet and a CRI runtime would build it: the pod's and the
// container's securityContext (user, groups with fsGroup, read-only root,
// capabilities, no new privileges, seccomp), the image's entrypoint with
// the container's arguments, the environment, the volume mounts (binds
// of the laid-out volumes). The network is the host's: the test reaches
// the process on loopback, and the process the API server.
func containerSpec(t *testing.T, pod *corev1.PodTemplateSpec, c *corev1.Container, img *v1.ConfigFile, rootfs string, volumes map[string]string, env map[string]string) map[string]any {
	t.Helper()
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	uid, gid := int64(0), int64(0)
	if u, g, ok := strings.Cut(img.Config.User, ":"); ok {
		uid, _ = strconv.ParseInt(u, 10, 64)
		gid, _ = strconv.ParseInt(g, 10, 64)
	}
	for _, p := range []*int64{psc.RunAsUser, sc.RunAsUser} {
		if p != nil {
			uid = *p
		}
	}
	for _, p := range []*int64{psc.RunAsGroup, sc.RunAsGroup} {
		if p != nil {
			gid = *p
		}
	}
	nonRoot := psc.RunAsNonRoot
	if sc.RunAsNonRoot != nil {
		nonRoot = sc.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot && uid == 0 {
		t.Fatalf("container %s: runAsNonRoot and user 0: the kubelet would refuse to start it", c.Name)
	}
	groups := []int64{}
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	groups = append(groups, psc.SupplementalGroups...)

	// The environment: the image's, the API server's service, the container's.
	envList := append([]string{}, img.Config.Env...)
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	expand := func(s string) string {
		return envRef.ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	args := append([]string{}, img.Config.Entrypoint...)
	if len(c.Command) > 0 {
		args = nil
		for _, a := range c.Command {
			args = append(args, expand(a))
		}
	}
	for _, a := range c.Args {
		args = append(args, expand(a))
	}

	var caps []string
	if sc.Capabilities != nil {
		dropAll := false
		for _, d := range sc.Capabilities.Drop {
			dropAll = dropAll || d == "ALL"
		}
		if !dropAll {
			t.Fatalf("container %s keeps the runtime's default capabilities: this test runs only containers that drop ALL", c.Name)
		}
		caps = capNames(sc.Capabilities.Add)
	} else {
		t.Fatalf("container %s has no capabilities stanza", c.Name)
	}
	noNewPrivs := sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	readOnly := sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem

	seccomp := psc.SeccompProfile
	if sc.SeccompProfile != nil {
		seccomp = sc.SeccompProfile
	}
	var seccompSpec any
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("container %s: seccomp %+v; this test runs RuntimeDefault only", c.Name, seccomp)
	}
	seccompSpec = map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"architectures": []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"},
		"syscalls":      []any{map[string]any{"names": runtimeDefaultDenied, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}},
	}

	mounts := []any{
		map[string]any{"destination": "/proc", "type": "proc", "source": "proc"},
		map[string]any{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		map[string]any{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		map[string]any{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		map[string]any{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": []string{"nosuid", "noexec", "nodev"}},
		map[string]any{"destination": "/sys", "type": "bind", "source": "/sys", "options": []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
	}
	for _, vm := range c.VolumeMounts {
		src, ok := volumes[vm.Name]
		if !ok {
			t.Fatalf("container %s mounts %s, which the pod does not define", c.Name, vm.Name)
		}
		if vm.SubPath != "" {
			t.Fatalf("container %s: subPath is not laid out by this test", c.Name)
		}
		opts := []string{"rbind", "nosuid", "nodev"}
		if vm.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, map[string]any{"destination": vm.MountPath, "type": "bind", "source": src, "options": opts})
	}
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]any{"uid": uid, "gid": gid, "additionalGids": groups},
			"args":     args,
			"env":      envList,
			"cwd":      "/",
			"capabilities": map[string]any{
				"bounding": caps, "effective": caps, "permitted": caps, "inheritable": []string{}, "ambient": []string{},
			},
			"noNewPrivileges": noNewPrivs,
		},
		"root":     map[string]any{"path": rootfs, "readonly": readOnly},
		"hostname": "pod",
		"mounts":   mounts,
		"linux": map[string]any{
			"namespaces": []any{map[string]any{"type": "pid"}, map[string]any{"type": "ipc"}, map[string]any{"type": "uts"}, map[string]any{"type": "mount"}},
			"maskedPaths": []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
			"seccomp":       seccompSpec,
		},
	}
}

// containerEnv is the environment the kubelet gives container c: the API
// server's service, then the container's own entries resolved.
func containerEnv(t *testing.T, pod *corev1.PodTemplateSpec, c *corev1.Container, podName, namespace, node string, secrets map[string]map[string][]byte, apiHost, apiPort string) map[string]string {
	t.Helper()
	env := map[string]string{"KUBERNETES_SERVICE_HOST": apiHost, "KUBERNETES_SERVICE_PORT": apiPort, "HOSTNAME": podName}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = podName
			case "metadata.namespace":
				env[e.Name] = namespace
			case "spec.nodeName":
				env[e.Name] = node
			case "spec.serviceAccountName":
				env[e.Name] = pod.Spec.ServiceAccountName
			default:
				t.Fatalf("env %s: field %s is not resolved by this test", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.ResourceFieldRef != nil:
			q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(e.ValueFrom.ResourceFieldRef.Resource, "limits."))]
			if !ok {
				t.Fatalf("env %s: no %s", e.Name, e.ValueFrom.ResourceFieldRef.Resource)
			}
			env[e.Name] = strconv.FormatInt(q.Value(), 10)
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = string(secrets[e.ValueFrom.SecretKeyRef.Name][e.ValueFrom.SecretKeyRef.Key])
		default:
			t.Fatalf("env %s: its source is not resolved by this test", e.Name)
		}
	}
	return env
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
