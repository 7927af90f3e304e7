package connector_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/services/connector"
)

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// deploymentTLS writes a serving key pair for the loopback names and the CA
// that signed it: certFile, keyFile, caFile.
func deploymentTLS(t *testing.T) (string, string, string) {
	t.Helper()
	ca, err := pki.NewCA("connector")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("localhost", pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	caFile, err := ca.WriteCA(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, caFile
}

// startDeployment runs the deployment role on a loopback port it picks.
func startDeployment(t *testing.T, config, kubeconfig string) (*proc, string) {
	t.Helper()
	certFile, keyFile, caFile := deploymentTLS(t)
	p := startProc(t, config, nil, "--role", "deployment", "--listen", "127.0.0.1:0", "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--kubeconfig", kubeconfig)
	return p, caFile
}

// sendTLS publishes to the deployment role over TLS.
func sendTLS(t *testing.T, p *proc, caFile, tokenFile string, nodes ...string) outcome {
	t.Helper()
	pub, err := connector.NewPublisher(credentials.Config{Address: p.addr, TLS: true, CAFile: caFile, ServerName: "localhost", TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	before, n := p.metricsNow(t), len(p.stored(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = pub.Publish(ctx, events(nodes...)...)
	st := status.Convert(err)
	o := outcome{code: st.Code(), moved: deltas(before, p.metricsNow(t))}
	if err != nil {
		o.reason = st.Message()
	}
	for _, e := range p.stored(t)[n:] {
		o.stored = append(o.stored, e.Node)
	}
	if o.code == codes.Unknown {
		t.Logf("publish: %v", err)
	}
	return o
}
