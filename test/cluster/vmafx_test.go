package cluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/services/cli"
	"github.com/callerauth/callerauth/token"
)

var vmafxJobs = schema.GroupVersionResource{Group: "vmafx.callerauth.dev", Version: "v1alpha1", Resource: "vmafxjobs"}

// TestSeed000VmafxOnTheNode: the vmafx chart (controller, operator and the
// node DaemonSet) on the node, two tenants whose identity providers (dev
// issuers) serve on the node's address: the operator, with tenant-a's
// token, submits a VmafxJob; the node DaemonSet's pod claims it and
// measures the clips on the node's hostPath; the VmafxJob ends Succeeded
// with its scores. A VmafxJob naming tenant-b's job stays Pending, its
// reason (JobNotFound) a condition and a Warning Event.
func TestSeed000VmafxOnTheNode(t *testing.T) {
	readoutOnFailure(t)
	ctx := context.Background()
	const ns, service = "vmafx", "vmafx-controller"
	cs := node.API.Client
	namespace(ctx, t, ns, "privileged") // the node DaemonSet's clip hostPath (docs/deploy.md)

	// The tenants' identity providers, where the controller's pod reaches
	// them.
	idps := map[string]*devissuer.Issuer{}
	var tenants []map[string]any
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		iss := serveIssuer(t)
		idps[tenant] = iss
		ca, err := os.ReadFile(iss.CAFile())
		if err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, map[string]any{"name": tenant, "issuer": iss.Issuer(), "audiences": []string{"vmafx-controller"},
			"rolesClaim": "scp", "certificateAuthority": string(ca)})
	}
	mint := func(tenant, subject, roles string) string {
		tok, err := idps[tenant].MintIdentity(devissuer.IdentityRequest{Subject: subject, Audiences: []string{"vmafx-controller"},
			Lifetime: time.Hour, Claims: map[string]any{"scp": roles}})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}

	// No cluster DNS on this node: the node and the operator are given the
	// controller's Service by its cluster IP, the Service made first.
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: service},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8443}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	serverName := service + "." + ns + ".svc"
	ca := servingSecret(ctx, t, ns, "vmafx-controller-tls", service, serverName, serverName+".cluster.local")
	secret(ctx, t, ns, "vmafx-node-token", map[string][]byte{"token": []byte(mint("tenant-a", "node-1", "vmafx:node"))})
	secret(ctx, t, ns, "vmafx-operator-token", map[string][]byte{"token": []byte(mint("tenant-a", "operator", "vmafx:reader vmafx:submitter"))})

	// tenant-a's clips on the node, where the node DaemonSet reads them.
	clips := node.HostDir("/var/lib/vmafx/clips")
	var out bytes.Buffer
	if err := cli.Execute(ctx, &cli.Options{Stdout: &out, Stderr: &out}, []string{"vmafx", "clip", "--out-dir", filepath.Join(clips, "tenant-a", "try"),
		"--width", "64", "--height", "48", "--frames", "5"}); err != nil {
		t.Fatalf("vmafx clip: %v\n%s", err, out.String())
	}
	if err := filepath.Walk(filepath.Join(clips), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if fi.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	}); err != nil {
		t.Fatal(err)
	}

	values, err := yaml.Marshal(map[string]any{
		"tenants":     tenants,
		"credentials": map[string]any{"tenant": "tenant-a"},
		"controller":  map[string]any{"address": fmt.Sprintf("%s:8443", svc.Spec.ClusterIP), "serverName": serverName},
		"node":        map[string]any{"clipsHostPath": clips, "poll": "1s", "reportEvery": "1s"},
		"operator":    map[string]any{"poll": "1s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	install(ctx, t, "vmafx", "vmafx", ns, "privileged", string(values))

	// tenant-b's own job, submitted to the controller from the node.
	conn, err := grpc.NewClient(fmt.Sprintf("%s:8443", svc.Spec.ClusterIP),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return node.DialContext(ctx, "tcp", addr) }),
		grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: pool(ca.PEM), ServerName: serverName, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(credentials.PerRPC(token.Static(mint("tenant-b", "ci-b", "vmafx:submitter vmafx:reader")))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	theirs, err := vmafxv1.NewJobServiceClient(conn).SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "b/ref.y4m", Distorted: "b/dist.y4m", Metrics: []string{"psnr"}}})
	if err != nil {
		t.Fatalf("tenant-b's submission: %v", err)
	}

	dyn, err := dynamic.NewForConfig(node.API.REST)
	if err != nil {
		t.Fatal(err)
	}
	jobs := dyn.Resource(vmafxJobs).Namespace(ns)
	for name, spec := range map[string]map[string]any{
		"try":    {"reference": "try/reference.y4m", "distorted": "try/distorted.y4m", "metrics": []any{"psnr", "ssim"}},
		"theirs": {"jobID": theirs.GetJob().GetId(), "reference": "b/ref.y4m", "distorted": "b/dist.y4m", "metrics": []any{"psnr"}},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "vmafx.callerauth.dev/v1alpha1", "kind": "VmafxJob",
			"metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := jobs.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("VmafxJob %s: %v", name, err)
		}
	}
	status := func(name string) (map[string]any, error) {
		o, err := jobs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		st, _, _ := unstructured.NestedMap(o.Object, "status")
		return st, nil
	}
	if err := poll(ctx, 2*time.Minute, func() error {
		st, err := status("try")
		if err != nil {
			return err
		}
		if st["phase"] != "Succeeded" {
			return fmt.Errorf("VmafxJob try: %v", st)
		}
		if s, _ := st["summary"].(string); !strings.Contains(s, "psnr") || !strings.Contains(s, "ssim") {
			return fmt.Errorf("VmafxJob try: summary %q", s)
		}
		t.Logf("VmafxJob try: %s, %s", st["phase"], st["summary"])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func() error {
		st, err := status("theirs")
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(st, "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "ControllerReachable" && m["status"] == "False" && m["reason"] == "JobNotFound" && st["phase"] == "Pending" {
				t.Logf("VmafxJob theirs: %s, %s: %s", st["phase"], m["reason"], m["message"])
				return nil
			}
		}
		return fmt.Errorf("VmafxJob theirs: %v", st)
	}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 30*time.Second, func() error {
		evs, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "theirs" && e.Reason == "JobNotFound" && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event JobNotFound for VmafxJob theirs among %d", len(evs.Items))
	}); err != nil {
		t.Fatal(err)
	}
}

// serveIssuer serves a tenant's identity provider where the controller's
// pod reaches it, until t ends.
func serveIssuer(t *testing.T) *devissuer.Issuer {
	t.Helper()
	iss, closeIssuer, err := node.ServeIssuer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeIssuer)
	return iss
}

func pool(pemCerts []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pemCerts)
	return p
}
