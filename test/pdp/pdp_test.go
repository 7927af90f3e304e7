// Package pdp_test starts the real pdp binary with TLS on loopback against
// the dev issuer and a real kube-apiserver, and checks every record with the
// real `callerauth decision verify`.
package pdp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

var (
	pdpBin, callerauthBin string
	apiserver             *kubeapi.Server
)

const example = "../../examples/secrets-engine"

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/pdp", "cmd/callerauth"}, func() (func(), error) {
		pdpBin, callerauthBin = bins["pdp"], bins["callerauth"]
		return nil, nil
	}, kubeapi.ForTests(&apiserver))
}

type pdpProc struct {
	url    string
	caFile string
	jwks   string // the JWKS as fetched, in a file
	client *http.Client
	proc   *e2e.Process
}

// startPDP runs the binary with TLS on loopback, serving the
// secrets-engine example.
func startPDP(t *testing.T, mode, kubeconfig, binding string) *pdpProc {
	t.Helper()
	return startPackage(t, example, mode, kubeconfig, binding)
}

// startPackage runs the binary with TLS on loopback, serving the example
// package in dir.
func startPackage(t *testing.T, pkg, mode, kubeconfig, binding string, extra ...string) *pdpProc {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("pdp")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("localhost", pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert, key := write("tls.crt", certPEM), write("tls.key", keyPEM)
	caFile, _ := ca.WriteCA(filepath.Join(dir, "ca.crt"))
	signing := filepath.Join(dir, "signing.pem")
	if out, err := exec.Command(callerauthBin, "decision", "keygen", "--out", signing).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	proc := e2e.Start(t, pdpBin, append([]string{"--listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key,
		"--policy-dir", filepath.Join(pkg, "policy"), "--registry", filepath.Join(pkg, "registry.json"),
		"--kubeconfig", kubeconfig, "--caller-auth-mode", mode, "--caller-binding", binding,
		"--signing-key-file", signing, "--metrics-listen", ""}, extra...))
	addr := proc.LogValue(t, "pdp: serving", "address", 60*time.Second)
	p := &pdpProc{url: "https://" + addr, caFile: caFile, proc: proc}
	p.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	resp, err := p.client.Get(p.url + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.jwks = write("jwks.json", b)
	return p
}

func (p *pdpProc) check(t *testing.T, token string, body []byte) (int, []byte) {
	t.Helper()
	return p.post(t, token, "/v1/check", body)
}

// verify runs `callerauth decision verify` on a response.
func (p *pdpProc) verify(t *testing.T, response, request []byte) (string, error) {
	t.Helper()
	dir := t.TempDir()
	rf, qf := filepath.Join(dir, "response.json"), filepath.Join(dir, "request.json")
	_ = os.WriteFile(rf, response, 0o600)
	_ = os.WriteFile(qf, request, 0o600)
	out, err := exec.Command(callerauthBin, "decision", "verify", "--jwks", p.jwks, "--request", qf, rf).CombinedOutput()
	return string(out), err
}

type row struct {
	name    string
	token   string
	enforce int
	reason  string
}

func runRows(t *testing.T, p *pdpProc, mode, principal string, rows []row) {
	t.Helper()
	allow, err := os.ReadFile(filepath.Join(example, "check_request_allow_rotate.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		code, body := p.check(t, r.token, allow)
		want := r.enforce
		if mode == "warn" {
			want = 200
		}
		if code != want {
			t.Errorf("%s: status %d %s; want %d", r.name, code, body, want)
			continue
		}
		if code != 200 {
			continue
		}
		out, err := p.verify(t, body, allow)
		if err != nil {
			t.Errorf("%s: decision verify failed: %v\n%s", r.name, err, out)
			continue
		}
		wantCaller := "caller " + principal
		if r.reason != "" {
			wantCaller = "NOT AUTHENTICATED (" + r.reason + ")"
		}
		if !strings.Contains(out, "effect allow, reason catalog_lane_policy_matched") || !strings.Contains(out, wantCaller) || !strings.Contains(out, `"policy_version": "v2"`) {
			t.Errorf("%s: verify output lacks the decision or %q:\n%s", r.name, wantCaller, out)
		}
	}
}

func TestDevIssuer(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	mint := func(sa, aud string, issuedAt time.Time) string {
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: sa, Audiences: []string{aud}, Lifetime: 10 * time.Minute, IssuedAt: issuedAt})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	const principal = "system:serviceaccount:secrets-engine:secrets-engine"
	for _, mode := range []string{"enforce", "warn"} {
		t.Run(mode, func(t *testing.T) {
			p := startPDP(t, mode, iss.KubeconfigFile(), "secrets-engine="+principal)
			runRows(t, p, mode, principal, []row{
				{"positive", mint("secrets-engine", "flex-auth", time.Time{}), 200, ""},
				{"N1 no Authorization", "", 401, "token_missing"},
				{"N2 wrong service account", mint("default", "flex-auth", time.Time{}), 403, "principal_cannot_represent_system"},
				{"N3 another audience", mint("secrets-engine", "https://kubernetes.default.svc", time.Time{}), 401, "token_invalid"},
				{"N4 past exp", mint("secrets-engine", "flex-auth", time.Now().Add(-20*time.Minute)), 401, "token_invalid"},
			})
		})
	}
	t.Run("records that must not verify", func(t *testing.T) {
		p := startPDP(t, "enforce", iss.KubeconfigFile(), "secrets-engine="+principal)
		allow, _ := os.ReadFile(filepath.Join(example, "check_request_allow_rotate.json"))
		deny, _ := os.ReadFile(filepath.Join(example, "check_request_deny_private_key.json"))
		tok := mint("secrets-engine", "flex-auth", time.Time{})
		_, good := p.check(t, tok, allow)
		_, denied := p.check(t, tok, deny)
		other := startPDP(t, "enforce", iss.KubeconfigFile(), "secrets-engine="+principal) // another key
		_, foreign := other.check(t, tok, allow)
		tampered := bytes.Replace(good, []byte(`"effect":"allow"`), []byte(`"effect":"deny"`), 1)
		if bytes.Equal(tampered, good) {
			t.Fatal("could not tamper with the record")
		}
		var s decision.Signed
		_ = json.Unmarshal(denied, &s)
		for name, c := range map[string]struct {
			resp, req []byte
			want      string
		}{
			"a tampered record":                     {tampered, allow, "signature"},
			"a record signed by another key":        {foreign, allow, "not in the JWKS"},
			"a record replayed for another request": {denied, allow, "not for this request"},
		} {
			out, err := p.verify(t, c.resp, c.req)
			if err == nil || !strings.Contains(out, "NOT VERIFIED") || !strings.Contains(out, c.want) {
				t.Errorf("%s: verify %v\n%s", name, err, out)
			}
		}
	})
	t.Run("several responses at once, one bad", func(t *testing.T) {
		p := startPDP(t, "enforce", iss.KubeconfigFile(), "secrets-engine="+principal)
		allow, _ := os.ReadFile(filepath.Join(example, "check_request_allow_rotate.json"))
		tok := mint("secrets-engine", "flex-auth", time.Time{})
		dir := t.TempDir()
		qf := filepath.Join(dir, "request.json")
		_ = os.WriteFile(qf, allow, 0o600)
		var files []string
		for i := range 3 {
			_, body := p.check(t, tok, allow)
			if i == 1 {
				body = bytes.Replace(body, []byte(`"effect":"allow"`), []byte(`"effect":"deny"`), 1)
			}
			f := filepath.Join(dir, fmt.Sprintf("r%d.json", i))
			_ = os.WriteFile(f, body, 0o600)
			files = append(files, f)
		}
		out, err := exec.Command(callerauthBin, append([]string{"decision", "verify", "--jwks", p.jwks, "--request", qf}, files...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "2 of 3 verified") || !strings.Contains(string(out), files[1]+": NOT VERIFIED") ||
			!strings.Contains(string(out), files[0]+": verified: effect allow") || strings.Contains(string(out), files[2]+": NOT") {
			t.Errorf("verify of three responses, the second tampered: %v\n%s", err, out)
		}
		out, err = exec.Command(callerauthBin, "decision", "verify", "--jwks", p.jwks, "--request", qf, files[0], files[2]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "2 of 2 verified") {
			t.Errorf("verify of two good responses: %v\n%s", err, out)
		}
	})
}

// TestKubeAPIServer: tokens minted by TokenRequest, reviewed by the real API
// server. (N4 needs a token past exp, which the API server will not mint
// and keeps accepting for a minute past exp; the authn matrix covers expiry
// against the real API server.)
func TestKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := fmt.Sprintf("secrets-engine-%d", time.Now().UnixNano()%1e9)
	if err := apiserver.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"secrets-engine", "default"} {
		if _, err := apiserver.ServiceAccount(ctx, ns, sa); err != nil {
			t.Fatal(err)
		}
	}
	mint := func(sa string, auds ...string) string {
		tok, err := apiserver.Token(ctx, ns, sa, auds, 600, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := apiserver.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	principal := "system:serviceaccount:" + ns + ":secrets-engine"
	for _, mode := range []string{"enforce", "warn"} {
		t.Run(mode, func(t *testing.T) {
			p := startPDP(t, mode, kubeconfig, "secrets-engine="+principal)
			runRows(t, p, mode, principal, []row{
				{"positive", mint("secrets-engine", "flex-auth"), 200, ""},
				{"N1 no Authorization", "", 401, "token_missing"},
				{"N2 wrong service account", mint("default", "flex-auth"), 403, "principal_cannot_represent_system"},
				{"N3 minted without --audience=flex-auth", mint("secrets-engine"), 401, "token_invalid"},
			})
		})
	}
}
