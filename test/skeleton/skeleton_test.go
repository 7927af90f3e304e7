// Package skeleton_test checks, with the real binaries, what every service
// gets from the shared skeleton (internal/serve): a serving certificate
// rotated on disk is picked up without a restart, and a listener that
// cannot be opened stops the process with a non-zero exit.
package skeleton_test

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/tenantconf"
)

var bins map[string]string

func TestMain(m *testing.M) {
	e2e.Main(m, &bins, []string{"cmd/pdp", "cmd/platform-connector", "cmd/vmafx-controller"})
}

// service is how to start one service with TLS on listen.
type service struct {
	bin, servingMsg string
	args            func(t *testing.T, dir, listen, cert, key string) []string
}

// kubeconfig serves a dev issuer for the TokenReview client the services
// build at start-up.
func kubeconfig(t *testing.T) string {
	t.Helper()
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	return iss.KubeconfigFile()
}

var services = map[string]service{
	"pdp": {bin: "pdp", servingMsg: "pdp: serving", args: func(t *testing.T, dir, listen, cert, key string) []string {
		signing := filepath.Join(dir, "signing.pem")
		if err := decision.GenerateKeyFile(signing); err != nil {
			t.Fatal(err)
		}
		return []string{"--listen", listen, "--metrics-listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-check-interval", "100ms", "--policy-dir", "../../examples/secrets-engine/policy", "--registry", "../../examples/secrets-engine/registry.json",
			"--kubeconfig", kubeconfig(t), "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine", "--signing-key-file", signing}
	}},
	"platform-connector": {bin: "platform-connector", servingMsg: "connector: serving", args: func(t *testing.T, dir, listen, cert, key string) []string {
		cfg := filepath.Join(dir, "config.json")
		if err := os.WriteFile(cfg, []byte(`{"enableNodeBindingAuth": true, "AuthAudience": "platform-connector", "AuthCrossNodeServiceAccounts": []}`), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--role", "deployment", "--config", cfg, "--listen", listen, "--metrics-listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-check-interval", "100ms", "--datastore", filepath.Join(dir, "events.db"), "--kubeconfig", kubeconfig(t)}
	}},
	"vmafx-controller": {bin: "vmafx-controller", servingMsg: "controller: serving", args: func(t *testing.T, dir, listen, cert, key string) []string {
		iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
		authnConfig := tenantconf.Write(t, filepath.Join(dir, "authentication-config.yaml"),
			tenantconf.Tenant{Name: "tenant-a", Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile()})
		return []string{"--listen", listen, "--metrics-listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-check-interval", "100ms", "--caller-authentication-config", authnConfig, "--datastore", filepath.Join(dir, "jobs.db")}
	}},
}

// writePair issues a serving certificate for 127.0.0.1 and writes it over
// cert and key (each file replaced atomically, as cert-manager and kubelet
// do), returning its serial.
func writePair(t *testing.T, ca *pki.CA, cert, key string) *big.Int {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue("127.0.0.1", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteFileAtomic(cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteFileAtomic(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber
}

// servedSerial is the serial of the certificate a TLS client is shown.
func servedSerial(addr string, roots *x509.CertPool) (*big.Int, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func TestRotatedCertificateIsServedWithoutRestart(t *testing.T) {
	for name, svc := range services {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ca, err := pki.NewCA("rotation test")
			if err != nil {
				t.Fatal(err)
			}
			cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			first := writePair(t, ca, cert, key)
			p := e2e.Start(t, bins[svc.bin], svc.args(t, dir, "127.0.0.1:0", cert, key))
			addr := p.LogValue(t, svc.servingMsg, "address", 60*time.Second)
			got, err := servedSerial(addr, ca.Pool())
			if err != nil || got.Cmp(first) != 0 {
				t.Fatalf("first certificate: serial %v (%v), want %v", got, err, first)
			}
			second := writePair(t, ca, cert, key)
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				got, err = servedSerial(addr, ca.Pool())
				if err == nil && got.Cmp(second) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after rotation the client still sees serial %v (%v), want %v", got, err, second)
				}
			}
			if _, exited := p.Exited(0); exited {
				t.Fatal("the service restarted or died")
			}
			if logged := p.LogValue(t, "serve: the serving certificate: reloaded", "serial", 10*time.Second); logged != second.String() {
				t.Errorf("the rotation was logged with serial %s, want %s", logged, second)
			}
		})
	}
}

func TestListenerThatCannotBeOpenedExitsNonZero(t *testing.T) {
	for name, svc := range services {
		t.Run(name, func(t *testing.T) {
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			dir := t.TempDir()
			ca, err := pki.NewCA("listen test")
			if err != nil {
				t.Fatal(err)
			}
			cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			writePair(t, ca, cert, key)
			p := e2e.Start(t, bins[svc.bin], svc.args(t, dir, busy.Addr().String(), cert, key))
			code, exited := p.Exited(60 * time.Second)
			if !exited {
				t.Fatal("still running on a port another process holds")
			}
			if code == 0 || !strings.Contains(p.Output(), "--listen "+busy.Addr().String()) || !strings.Contains(p.Output(), "address already in use") {
				t.Fatalf("exit %d; want non-zero naming --listen and the cause:\n%s", code, p.Output())
			}
		})
	}
}
