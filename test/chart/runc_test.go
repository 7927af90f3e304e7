package chart_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/charts"
	"github.com/callerauth/callerauth/internal/tools/images"
)

// built are the images make images builds, built once for this package
// (buildImages) into imagesDir.
var (
	built     = map[string]images.Image{}
	imagesDir string
)

// buildImages builds every image as make images does, for the runc tests.
func buildImages() (func(), error) {
	dir, err := os.MkdirTemp("", "callerauth-images-test-")
	if err != nil {
		return nil, err
	}
	imgs, err := makeImages(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for _, im := range imgs {
		built[im.Name] = im
	}
	imagesDir = dir
	return func() { _ = os.RemoveAll(dir) }, nil
}

func makeImages(out string) ([]images.Image, error) { return images.Make("../..", out) }

// TestImagesAreReproducible: building every image again gives the same
// digests, and each has its SBOM, naming the modules linked in (cobra,
// which every binary links).
func TestImagesAreReproducible(t *testing.T) {
	again, err := makeImages(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(images.Binaries) {
		t.Fatalf("%d images, want one per binary (%d)", len(again), len(images.Binaries))
	}
	for _, im := range again {
		if im.Digest != built[im.Name].Digest {
			t.Errorf("%s: built twice, %s then %s", im.Name, built[im.Name].Digest, im.Digest)
		}
		sbom, err := os.ReadFile(im.SBOM)
		if err != nil || !bytes.Contains(sbom, []byte(`"spdxVersion": "SPDX-2.3"`)) || !bytes.Contains(sbom, []byte(im.Digest)) ||
			!bytes.Contains(sbom, []byte("pkg:golang/github.com/spf13/cobra@")) {
			t.Errorf("%s: SBOM %s: %v", im.Name, im.SBOM, err)
		}
		t.Logf("%s %s", im.Ref, im.Digest)
	}

	// skopeo, as a registry client, reads each OCI layout by its tag (the
	// manifest it finds has the digest make images printed) and each
	// docker load tarball (one layer, the image's labels).
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Fatal("skopeo is not installed: make test installs it (make skopeo)")
	}
	for _, im := range again {
		tag := im.Ref[strings.LastIndex(im.Ref, ":")+1:]
		raw, err := exec.Command("skopeo", "inspect", "--raw", "oci:"+im.Layout+":"+tag).Output()
		if err != nil {
			t.Fatalf("skopeo inspect oci:%s:%s: %v", im.Layout, tag, err)
		}
		if d := fmt.Sprintf("sha256:%x", sha256.Sum256(raw)); d != im.Digest {
			t.Errorf("%s: skopeo finds manifest %s under tag %s; make images printed %s", im.Name, d, tag, im.Digest)
		}
		info, err := exec.Command("skopeo", "inspect", "docker-archive:"+im.Tarballs[0]).Output()
		if err != nil {
			t.Fatalf("skopeo inspect docker-archive:%s: %v", im.Tarballs[0], err)
		}
		var got struct {
			Labels map[string]string
			Layers []string
			Os     string
		}
		if err := json.Unmarshal(info, &got); err != nil || len(got.Layers) != 1 || got.Labels["org.opencontainers.image.title"] != im.Name || got.Os != "linux" {
			t.Errorf("%s: the docker tarball as skopeo reads it: %s (%v)", im.Name, info, err)
		}
	}
}

// rootfsOf holds each image's file system, extracted once: every
// container of it shares the directory (each runs with a read-only root).
var rootfsOf = struct {
	sync.Mutex
	dirs map[string]string
	cfgs map[string]*v1.ConfigFile
}{dirs: map[string]string{}, cfgs: map[string]*v1.ConfigFile{}}

func rootFS(t *testing.T, im images.Image) (string, *v1.ConfigFile) {
	t.Helper()
	rootfsOf.Lock()
	defer rootfsOf.Unlock()
	if d, ok := rootfsOf.dirs[im.Name]; ok {
		return d, rootfsOf.cfgs[im.Name]
	}
	d := filepath.Join(imagesDir, "rootfs", im.Name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := extractImage(t, im.Layout, d)
	rootfsOf.dirs[im.Name], rootfsOf.cfgs[im.Name] = d, cfg
	return d, cfg
}

// runc runs one pod's containers from the built images, with the chart's
// securityContexts, arguments and volumes laid out as the kubelet would.
type runc struct {
	t        *testing.T
	dir      string // bundles, volumes, the host's root, runc's state
	files    *podFiles
	apiHost  string
	apiPort  string
	mu       sync.Mutex
	running  []string
	outputs  map[string]*bytes.Buffer
	nextName int
}

func newRunc(t *testing.T, files *podFiles) *runc {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the image tests create containers with runc and need root (CI runs as root; make test installs runc)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatal("runc is not installed: make test installs it (make runc)")
	}
	u, err := url.Parse(apiserver.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Short: a Unix socket's path under it must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "rc")
	if err != nil {
		t.Fatal(err)
	}
	files.hostRoot = filepath.Join(dir, "host")
	r := &runc{t: t, dir: dir, files: files, apiHost: u.Hostname(), apiPort: u.Port(), outputs: map[string]*bytes.Buffer{}}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range r.running {
			_ = exec.Command("runc", "--root", filepath.Join(dir, "state"), "delete", "--force", id).Run()
		}
		_ = os.RemoveAll(dir)
	})
	return r
}

// pod lays out tmpl's volumes and returns the host directory of each.
func (r *runc) pod(tmpl *corev1.PodTemplateSpec) map[string]string {
	r.t.Helper()
	vols := map[string]string{}
	voldir := filepath.Join(r.dir, "volumes", strconv.Itoa(r.nextName))
	r.nextName++
	var fsGroup *int64
	if tmpl.Spec.SecurityContext != nil {
		fsGroup = tmpl.Spec.SecurityContext.FSGroup
	}
	for _, v := range tmpl.Spec.Volumes {
		vols[v.Name] = r.files.layVolume(r.t, voldir, v, fsGroup)
	}
	// The ServiceAccount admission's kube-api-access volume, unless the pod
	// opts out (the test applies the chart, whose accounts say nothing).
	if tmpl.Spec.AutomountServiceAccountToken == nil || *tmpl.Spec.AutomountServiceAccountToken {
		exp := int64(3607)
		v := corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}}
		vols[v.Name] = r.files.layVolume(r.t, voldir, v, fsGroup)
		for i := range tmpl.Spec.Containers {
			tmpl.Spec.Containers[i].VolumeMounts = append(tmpl.Spec.Containers[i].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
		}
	}
	return vols
}

// start runs container c of the pod from image bin; wait: until it exits
// (an init container), else in the background. It returns the output so
// far and, for wait, the exit error.
func (r *runc) start(tmpl *corev1.PodTemplateSpec, c *corev1.Container, bin string, vols map[string]string, wait bool) (*bytes.Buffer, error) {
	r.t.Helper()
	im, ok := built[bin]
	if !ok {
		r.t.Fatalf("no image %s was built", bin)
	}
	if c.Image != im.Ref {
		r.t.Fatalf("container %s runs %s; make images builds %s", c.Name, c.Image, im.Ref)
	}
	id := fmt.Sprintf("%s-%d", c.Name, r.nextName)
	r.nextName++
	bundle := filepath.Join(r.dir, "bundles", id)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		r.t.Fatal(err)
	}
	rootfs, cfg := rootFS(r.t, im)
	env := containerEnv(r.t, tmpl, c, "pod-"+id, r.files.namespace, "node-a", r.files.secrets, r.apiHost, r.apiPort)
	writeJSON(r.t, filepath.Join(bundle, "config.json"), containerSpec(r.t, tmpl, c, cfg, rootfs, vols, env))
	cmd := exec.Command("runc", "--root", filepath.Join(r.dir, "state"), "run", "--bundle", bundle, id)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: out, mu: &r.mu}, &lockedWriter{w: out, mu: &r.mu}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r.mu.Lock()
	r.running = append(r.running, id)
	r.outputs[id] = out
	r.mu.Unlock()
	if wait {
		err := cmd.Run()
		return out, err
	}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		fmt.Fprintf(out, "\n[the container exited: %v]\n", err)
		r.mu.Unlock()
	}()
	return out, nil
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (r *runc) output(b *bytes.Buffer) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return b.String()
}

// probe waits until GET http://127.0.0.1:port/healthz and /readyz answer
// 200, as the kubelet's probes would.
func (r *runc) probe(port int, out *bytes.Buffer) {
	r.t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	for _, path := range []string{"/healthz", "/readyz"} {
		u := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
		var last string
		ok := false
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if strings.Contains(r.output(out), "[the container exited") {
				break
			}
			resp, err := client.Get(u)
			if err != nil {
				last = err.Error()
				continue
			}
			resp.Body.Close()
			last = resp.Status
			if resp.StatusCode == http.StatusOK {
				ok = true
				break
			}
		}
		if !ok {
			r.t.Fatalf("%s: %s\noutput:\n%s", u, last, r.output(out))
		}
	}
}

// freePort is a loopback port free now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// applyForRun renders the chart, applies it to the API server in
// namespace (so its ServiceAccounts and RBAC are real) and returns the
// objects and the pod templates.
func applyForRun(ctx context.Context, t *testing.T, chart, release, namespace, values string, crds ...string) ([]*unstructured.Unstructured, map[string]*corev1.PodTemplateSpec) {
	t.Helper()
	c := charts.NewCluster(t, apiserver.REST)
	if len(crds) > 0 {
		c.ApplyCRDs(ctx, t, crds...)
	}
	psNamespace(ctx, t, namespace, privileged)
	objs := appliedChart(ctx, t, c, chart, release, namespace, values)
	return objs, podTemplates(t, objs)
}

// saToken issues tokens for the pod's ServiceAccount from the real API
// server: the process is authorised by the chart's RBAC and nothing else.
func saToken(ctx context.Context, t *testing.T, namespace string, tmpl *corev1.PodTemplateSpec) func(string, int64) string {
	return func(aud string, seconds int64) string {
		var auds []string
		if aud != "" {
			auds = []string{aud}
		}
		tok, err := apiserver.Token(ctx, namespace, tmpl.Spec.ServiceAccountName, auds, seconds, nil)
		if err != nil {
			t.Fatalf("a token for %s/%s: %v", namespace, tmpl.Spec.ServiceAccountName, err)
		}
		return tok
	}
}

func tlsSecret(t *testing.T, host string) (map[string][]byte, *pki.CA) {
	t.Helper()
	ca, err := pki.NewCA("runc")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(host, pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.PEM}, ca
}

func mustCA(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(apiserver.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkArch(t *testing.T) {
	t.Helper()
	for _, im := range built {
		if len(im.Platforms) != 1 || im.Platforms[0] != "linux/"+runtime.GOARCH {
			t.Fatalf("%s: built for %v; runc runs linux/%s", im.Name, im.Platforms, runtime.GOARCH)
		}
	}
}

// TestPDPImageRunsUnderItsChart: the pdp image, run by runc as its chart
// runs it — user 65532, fsGroup, read-only root, no capabilities,
// RuntimeDefault seccomp, the chart's arguments — with the chart's Secrets
// and ConfigMaps laid out as the kubelet does (the signing key 0400,
// root-owned, given to the group by fsGroup) and a token of the chart's
// ServiceAccount, starts, reads its key and certificate, and answers its
// probes and a TokenReview-authenticated check over TLS.
func TestPDPImageRunsUnderItsChart(t *testing.T) {
	checkArch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port, metrics := freePort(t), freePort(t)
	ns := "runc-pdp"
	values := examplePDPValues(t, set(port, "port"), set(metrics, "metrics", "port"))
	objs, tmpls := applyForRun(ctx, t, pdpChart, "flex-auth", ns, values)
	tmpl := tmpls["Deployment/flex-auth-pdp"]
	signing := filepath.Join(t.TempDir(), "signing.pem")
	if err := decision.GenerateKeyFile(signing); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(signing)
	if err != nil {
		t.Fatal(err)
	}
	tlsData, ca := tlsSecret(t, "flex-auth-pdp")
	files := &podFiles{objs: objs, namespace: ns, caCert: mustCA(t), saToken: saToken(ctx, t, ns, tmpl),
		secrets: map[string]map[string][]byte{"flex-auth-tls": tlsData, "flex-auth-signing": {"signing.pem": key}}}
	r := newRunc(t, files)
	vols := r.pod(tmpl)
	keyFile := filepath.Join(vols["signing"], "signing.pem")
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o440 || st.Uid != 0 || st.Gid != 65532 {
		t.Fatalf("the signing key as the kubelet lays it out: %v %d:%d; want -r--r----- 0:65532 (0400 with fsGroup)", fi.Mode(), st.Uid, st.Gid)
	}
	out, _ := r.start(tmpl, &tmpl.Spec.Containers[0], "pdp", vols, false)
	r.probe(metrics, out)
	// A check, authenticated by TokenReview under the chart's RBAC.
	caller, err := apiserver.Token(ctx, "secrets-engine", "secrets-engine", []string{"flex-auth"}, 600, nil)
	if err != nil {
		if _, err2 := apiserver.ServiceAccount(ctx, "secrets-engine", "secrets-engine"); err2 != nil {
			_ = apiserver.Namespace(ctx, "secrets-engine")
			_, _ = apiserver.ServiceAccount(ctx, "secrets-engine", "secrets-engine")
		}
		if caller, err = apiserver.Token(ctx, "secrets-engine", "secrets-engine", []string{"flex-auth"}, 600, nil); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	code, body := check(t, client, fmt.Sprintf("https://127.0.0.1:%d", port), caller)
	if code != http.StatusOK {
		t.Fatalf("a check through the image: %d %s\noutput:\n%s", code, body, r.output(out))
	}
	t.Logf("pdp image: probes 200, a check %d; the signing key read as 0440 root:65532", code)

	// The check can fail: without fsGroup the kubelet leaves the key 0400
	// root:root, and the pdp, as 65532, cannot read it.
	noGroup := examplePDPValues(t, set(freePort(t), "port"), set(freePort(t), "metrics", "port"), set(nil, "podSecurityContext", "fsGroup"))
	objs, tmpls = applyForRun(ctx, t, pdpChart, "flex-auth", ns, noGroup)
	tmpl = tmpls["Deployment/flex-auth-pdp"]
	if tmpl.Spec.SecurityContext.FSGroup != nil {
		t.Fatal("fsGroup still set")
	}
	files.objs = objs
	vols = r.pod(tmpl)
	out, err = r.start(tmpl, &tmpl.Spec.Containers[0], "pdp", vols, true)
	if err == nil || !strings.Contains(r.output(out), "permission denied") {
		t.Fatalf("the pdp without fsGroup: %v\n%s", err, r.output(out))
	}
	t.Logf("without fsGroup: %s", lastLine(r.output(out)))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestConnectorImageRunsUnderItsChart: the socket role's DaemonSet —
// host-dirs first (root, CAP_CHOWN only), then the connector as 65532 —
// with the hostPath directories as the kubelet creates them (root, 0755):
// the connector creates its socket and datastore there and answers its
// probes.
func TestConnectorImageRunsUnderItsChart(t *testing.T) {
	checkArch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	metrics := freePort(t)
	ns := "runc-connector"
	objs, tmpls := applyForRun(ctx, t, chartDir, "nvsentinel", ns, auth("    enabled: true\n")+fmt.Sprintf("metrics: {port: %d}\n", metrics))
	tmpl := tmpls["DaemonSet/nvsentinel-platform-connector"]
	r := newRunc(t, &podFiles{objs: objs, namespace: ns, caCert: mustCA(t), saToken: saToken(ctx, t, ns, tmpl)})
	vols := r.pod(tmpl)
	if len(tmpl.Spec.InitContainers) != 1 {
		t.Fatalf("%d init containers; want host-dirs", len(tmpl.Spec.InitContainers))
	}
	initOut, err := r.start(tmpl, &tmpl.Spec.InitContainers[0], "platform-connector", vols, true)
	if err != nil {
		t.Fatalf("host-dirs: %v\n%s", err, r.output(initOut))
	}
	out, _ := r.start(tmpl, &tmpl.Spec.Containers[0], "platform-connector", vols, false)
	r.probe(metrics, out)
	sock := filepath.Join(vols["socket"], "platform-connector.sock")
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the socket: %v %v\n%s", fi, err, r.output(out))
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65532 {
		t.Fatalf("the socket is owned by %d", st.Uid)
	}
	if _, err := os.Stat(filepath.Join(vols["datastore"], "events.db")); err != nil {
		t.Fatalf("the datastore: %v\n%s", err, r.output(out))
	}
	t.Logf("host-dirs: %s; connector: probes 200, socket and datastore created by 65532", strings.TrimSpace(r.output(initOut)))

	// The check can fail: without host-dirs (daemonset.prepareHostDirs
	// false) on directories the kubelet created, the connector cannot
	// create its socket.
	objs, tmpls = applyForRun(ctx, t, chartDir, "nvsentinel", ns, auth("    enabled: true\n")+fmt.Sprintf("metrics: {port: %d}\ndaemonset: {prepareHostDirs: false}\n", freePort(t)))
	tmpl = tmpls["DaemonSet/nvsentinel-platform-connector"]
	r2 := newRunc(t, &podFiles{objs: objs, namespace: ns, caCert: mustCA(t), saToken: saToken(ctx, t, ns, tmpl)})
	vols = r2.pod(tmpl)
	out, err = r2.start(tmpl, &tmpl.Spec.Containers[0], "platform-connector", vols, true)
	if err == nil || !strings.Contains(r2.output(out), "permission denied") {
		t.Fatalf("the connector on root-owned host directories: %v\n%s", err, r2.output(out))
	}
	t.Logf("without host-dirs: %s", lastLine(r2.output(out)))

	// A platform that assigns the UID (OpenShift's restricted SCC: one of
	// the namespace's range, group 0) with podSecurityContext.runAsUser
	// unset: host-dirs gives the directories to that group, and the
	// connector, running as a UID the chart never named, writes them.
	m3 := freePort(t)
	objs, tmpls = applyForRun(ctx, t, chartDir, "nvsentinel", ns, auth("    enabled: true\n")+fmt.Sprintf("metrics: {port: %d}\npodSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}\n", m3))
	tmpl = tmpls["DaemonSet/nvsentinel-platform-connector"]
	assigned, root := int64(1000680000), int64(0)
	if tmpl.Spec.SecurityContext == nil || tmpl.Spec.SecurityContext.RunAsUser != nil {
		t.Fatalf("runAsUser unset in the values, the pod's securityContext is %+v", tmpl.Spec.SecurityContext)
	}
	tmpl.Spec.SecurityContext.RunAsUser, tmpl.Spec.SecurityContext.RunAsGroup = &assigned, &root // as the platform's admission does
	r3 := newRunc(t, &podFiles{objs: objs, namespace: ns, caCert: mustCA(t), saToken: saToken(ctx, t, ns, tmpl)})
	vols = r3.pod(tmpl)
	initOut, err = r3.start(tmpl, &tmpl.Spec.InitContainers[0], "platform-connector", vols, true)
	if err != nil {
		t.Fatalf("host-dirs: %v\n%s", err, r3.output(initOut))
	}
	out, _ = r3.start(tmpl, &tmpl.Spec.Containers[0], "platform-connector", vols, false)
	r3.probe(m3, out)
	fi, err = os.Stat(filepath.Join(vols["socket"], "platform-connector.sock"))
	if err != nil {
		t.Fatalf("the socket under an assigned UID: %v\n%s", err, r3.output(out))
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(assigned) || st.Gid != 0 {
		t.Fatalf("the socket is owned by %d:%d; want the assigned %d:0", st.Uid, st.Gid, assigned)
	}
	t.Logf("an assigned UID: host-dirs %s; the socket %d:0", strings.TrimSpace(r3.output(initOut)), assigned)
}

// TestVmafxImagesRunUnderTheirChart: the controller, the node and the
// operator images, each run as the chart runs it, answer their probes;
// the token refresher's image (callerauth-refresher) prints its version
// under the same restrictions.
func TestVmafxImagesRunUnderTheirChart(t *testing.T) {
	checkArch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	port, cm, nm, om := freePort(t), freePort(t), freePort(t), freePort(t)
	ns := "runc-vmafx"
	values := goodVmafx + fmt.Sprintf("controller: {port: %d, metricsPort: %d}\nnode: {metricsPort: %d}\noperator: {metricsPort: %d}\n", port, cm, nm, om)
	objs, tmpls := applyForRun(ctx, t, vmafxChart, "vmafx", ns, values, filepath.Join(vmafxChart, "crds", "vmafx.callerauth.dev_vmafxjobs.yaml"))
	tlsData, _ := tlsSecret(t, "vmafx-controller."+ns+".svc")
	secrets := map[string]map[string][]byte{
		"vmafx-controller-tls": tlsData,
		"vmafx-node-token":     {"token": []byte("not-a-token-yet")},
		"vmafx-operator-token": {"token": []byte("not-a-token-yet")},
	}
	for _, w := range []struct {
		name, bin string
		port      int
	}{
		{"Deployment/vmafx-controller", "vmafx-controller", cm},
		{"DaemonSet/vmafx-node", "vmafx-node", nm},
		{"Deployment/vmafx-operator", "vmafx-operator", om},
	} {
		t.Run(w.bin, func(t *testing.T) {
			tmpl := tmpls[w.name]
			if tmpl == nil {
				t.Fatalf("the chart renders no %s", w.name)
			}
			files := &podFiles{objs: objs, namespace: ns, caCert: mustCA(t), saToken: saToken(ctx, t, ns, tmpl), secrets: secrets}
			r := newRunc(t, files)
			if w.bin == "vmafx-node" {
				// The clip volume (type Directory) exists on the node.
				if err := os.MkdirAll(filepath.Join(files.hostRoot, "var/lib/vmafx/clips/tenant-a"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			vols := r.pod(tmpl)
			out, _ := r.start(tmpl, &tmpl.Spec.Containers[0], w.bin, vols, false)
			r.probe(w.port, out)
			t.Logf("%s: probes 200", w.bin)
		})
	}
	t.Run("callerauth-refresher", func(t *testing.T) {
		tmpl := tmpls["Deployment/vmafx-controller"].DeepCopy()
		c := tmpl.Spec.Containers[0].DeepCopy()
		c.Image, c.Args, c.Env, c.VolumeMounts = built["callerauth-refresher"].Ref, []string{"--version"}, nil, nil
		r := newRunc(t, &podFiles{objs: objs, namespace: ns, caCert: mustCA(t)})
		out, err := r.start(tmpl, c, "callerauth-refresher", map[string]string{}, true)
		if err != nil || !strings.Contains(r.output(out), "callerauth-refresher version") {
			t.Fatalf("callerauth-refresher --version: %v\n%s", err, r.output(out))
		}
		t.Logf("callerauth-refresher image: %s", strings.TrimSpace(r.output(out)))
	})
}
