package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/testjwt"
	"github.com/callerauth/callerauth/internal/services/cli"
)

type run struct {
	stdout, stderr bytes.Buffer
	err            error
}

func execute(ctx context.Context, t *testing.T, stdin string, now time.Time, args ...string) *run {
	t.Helper()
	r := &run{}
	o := &cli.Options{Stdin: strings.NewReader(stdin), Stdout: &r.stdout, Stderr: &r.stderr, Getenv: func(string) string { return "" }}
	if !now.IsZero() {
		o.Now = func() time.Time { return now }
	}
	r.err = cli.Execute(ctx, o, args)
	return r
}

func TestMintThenInspect(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "token")
	now := time.Now().Truncate(time.Second)
	r := execute(context.Background(), t, "", now, "token", "mint", "--state-dir", dir,
		"--service-account", "nvsentinel:gpu-monitor", "--audience", "platform-connector", "--audience", "other",
		"--duration", "10m", "--pod", "gpu-monitor-1", "--node", "node-a", "--output", out)
	if r.err != nil {
		t.Fatal(r.err)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	tok, _ := os.ReadFile(out)
	iss, err := devissuer.Open(dir, devissuer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rv := iss.Review(strings.TrimSpace(string(tok)), []string{"platform-connector"}); !rv.Authenticated {
		t.Fatalf("minted token does not review: %s", rv.Error)
	}

	r = execute(context.Background(), t, "", now.Add(4*time.Minute), "token", "inspect", out)
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, want := range []string{"signature NOT verified", `"alg": "ES256"`, `"sub": "system:serviceaccount:nvsentinel:gpu-monitor"`, `"name": "node-a"`, "expires:", "(in 6m0s)"} {
		if !strings.Contains(r.stdout.String(), want) {
			t.Errorf("inspect output lacks %q:\n%s", want, r.stdout.String())
		}
	}
	if sig := strings.Split(strings.TrimSpace(string(tok)), ".")[2]; strings.Contains(r.stdout.String(), sig) {
		t.Error("inspect printed the signature")
	}
}

func TestMintToStdout(t *testing.T) {
	r := execute(context.Background(), t, "", time.Time{}, "token", "mint", "--state-dir", t.TempDir(), "--service-account", "vmafx:op", "--audience", "a")
	if r.err != nil || !regexp.MustCompile(`^eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+\n$`).MatchString(r.stdout.String()) {
		t.Fatalf("stdout %q err %v", r.stdout.String(), r.err)
	}
}

func TestInspect(t *testing.T) {
	exp := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		stdin string
		now   time.Time
		wants []string
	}{
		{"expired", testjwt.Expiring("x", exp), exp.Add(3 * time.Minute), []string{"EXPIRED 3m0s ago", "will not send it"}},
		{"not a JWT", "opaque-token", exp, []string{"not a JWT (1 dot-separated segments, a JWT has 3)", "sends such a token as it is"}},
		{"bad payload", "eyJhbGciOiJFUzI1NiJ9.!!!.c2ln", exp, []string{"not a JWT (payload is not base64url)"}},
		{"no exp", testjwt.Unsigned(map[string]any{"sub": "x"}), exp, []string{"never (no exp claim)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := execute(context.Background(), t, tt.stdin+"\n", tt.now, "token", "inspect", "-")
			if r.err != nil {
				t.Fatal(r.err)
			}
			for _, w := range tt.wants {
				if !strings.Contains(r.stdout.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, r.stdout.String())
				}
			}
		})
	}
	if r := execute(context.Background(), t, "", exp, "token", "inspect", "/nonexistent/token"); r.err == nil || !strings.Contains(r.err.Error(), "/nonexistent/token") {
		t.Errorf("missing file: %v", r.err)
	}
	if r := execute(context.Background(), t, "  \n", exp, "token", "inspect"); r.err == nil || !strings.Contains(r.err.Error(), "holds no token") {
		t.Errorf("empty input: %v", r.err)
	}
}

func TestBadFlagsAreNamed(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"token", "mint", "--state-dir", dir, "--service-account", "just-a-name", "--audience", "a"}, `--service-account "just-a-name": want NAMESPACE:NAME`},
		{[]string{"token", "mint", "--state-dir", dir, "--service-account", "ns:sa"}, "--audience is required"},
		{[]string{"token", "mint", "--state-dir", dir, "--service-account", "ns:sa", "--audience", "a", "--duration", "599s"}, "less than 10 minutes"},
		{[]string{"token", "mint", "--state-dir", dir, "--service-account", "ns:sa", "--audience", "a", "--duration", "25h"}, "exceeds this issuer's maximum"},
		{[]string{"token", "mint", "--state-dir", dir, "--service-account", "ns:sa", "--audience", "a", "--algorithm", "HS256"}, `--algorithm "HS256"`},
		{[]string{"issuer", "serve", "--state-dir", dir, "--listen", "0.0.0.0:8443"}, "loopback only"},
		{[]string{"issuer", "serve", "--state-dir", dir, "--listen", "8443"}, `--listen "8443"`},
		{[]string{"issuer", "delete-pod", "--state-dir", dir, "nopod"}, "want NAMESPACE/NAME"},
		{[]string{"issuer", "delete-pod", "--state-dir", dir, "ns/nopod"}, "no such pod"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:2], " ")+" "+tt.want, func(t *testing.T) {
			r := execute(context.Background(), t, "", time.Time{}, tt.args...)
			if r.err == nil || !strings.Contains(r.err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", r.err, tt.want)
			}
		})
	}
}

func TestIssuerServeAndDeletePod(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	o := &cli.Options{Stdout: &capture.Buffer{}, Stderr: &capture.Buffer{}, Getenv: func(string) string { return "" }}
	done := make(chan error, 1)
	go func() {
		done <- cli.Execute(ctx, o, []string{"issuer", "serve", "--state-dir", dir, "--listen", "127.0.0.1:0"})
	}()

	// Wait for the kubeconfig: Serve writes it once the listener is open.
	var server string
	for deadline := time.Now().Add(10 * time.Second); server == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, devissuer.FileKubeconfig)); err == nil {
			if m := regexp.MustCompile(`server: (https://\S+)`).FindSubmatch(b); m != nil {
				server = string(m[1])
			}
		}
	}
	if server == "" {
		cancel()
		t.Fatalf("issuer did not start: %v", <-done)
	}
	iss, err := devissuer.Open(dir, devissuer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: iss.TLSConfig()}, Timeout: 5 * time.Second}
	resp, err := client.Get(server + devissuer.PathDiscovery)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if doc["issuer"] != devissuer.DefaultIssuer {
		t.Fatalf("discovery: %v", doc)
	}

	r := execute(context.Background(), t, "", time.Time{}, "token", "mint", "--state-dir", dir, "--service-account", "ns:sa", "--audience", "a", "--pod", "p", "--node", "n")
	if r.err != nil {
		t.Fatal(r.err)
	}
	tok := strings.TrimSpace(r.stdout.String())
	if st := iss.Review(tok, []string{"a"}); !st.Authenticated {
		t.Fatal(st.Error)
	}
	if r := execute(context.Background(), t, "", time.Time{}, "issuer", "delete-pod", "--state-dir", dir, "ns/p"); r.err != nil {
		t.Fatal(r.err)
	}
	if st := iss.Review(tok, []string{"a"}); st.Authenticated {
		t.Fatal("token of a deleted pod still authenticated")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after interrupt", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(o.Stdout.(*capture.Buffer).String(), "dev issuer serving on https://127.0.0.1:") {
		t.Errorf("serve output: %s", o.Stdout.(*capture.Buffer).String())
	}
}

// TestDecisionKeygen: keygen writes a key the pdp's key loader reads, of
// the algorithm asked for; an unknown one is refused naming it.
func TestDecisionKeygen(t *testing.T) {
	for alg, pemType := range map[string]string{"ES256": "*ecdsa.PrivateKey", "EdDSA": "ed25519.PrivateKey"} {
		out := filepath.Join(t.TempDir(), "signing.pem")
		r := execute(context.Background(), t, "", time.Time{}, "decision", "keygen", "--out", out, "--alg", alg)
		if r.err != nil || !strings.Contains(r.stdout.String(), alg) {
			t.Fatalf("%s: %q %v", alg, r.stdout.String(), r.err)
		}
		keys, err := decision.LoadKeyFile(out)
		if err != nil || len(keys) != 1 || fmt.Sprintf("%T", keys[0]) != pemType {
			t.Fatalf("%s: %d keys of %T, %v", alg, len(keys), keys, err)
		}
	}
	r := execute(context.Background(), t, "", time.Time{}, "decision", "keygen", "--out", filepath.Join(t.TempDir(), "k.pem"), "--alg", "HS256")
	if r.err == nil || !strings.Contains(r.err.Error(), `"HS256"`) {
		t.Fatalf("HS256: %v", r.err)
	}
}

// TestVersion: `callerauth version` and `--version` print the build.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := execute(context.Background(), t, "", time.Time{}, args...)
		if r.err != nil || !strings.Contains(r.stdout.String(), "callerauth") || !strings.Contains(r.stdout.String(), "go1.") {
			t.Errorf("%v: %v %q", args, r.err, r.stdout.String())
		}
	}
}

// TestStateDirThatCannotBeMadeNamesTheFlag: a state directory the issuer
// cannot make (a container's HOME on a read-only root) is refused naming
// the directory and --state-dir, not as a bare mkdir error.
func TestStateDirThatCannotBeMadeNamesTheFlag(t *testing.T) {
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := cli.Execute(context.Background(), &cli.Options{Stdout: &out, Stderr: &out, Getenv: func(k string) string {
		return map[string]string{"XDG_STATE_HOME": filepath.Join(blocked, "state")}[k]
	}}, []string{"token", "mint", "--service-account", "a:b", "--audience", "x"})
	if err == nil || !strings.Contains(err.Error(), "--state-dir") || !strings.Contains(err.Error(), filepath.Join(blocked, "state", "callerauth", "dev-issuer")) {
		t.Fatalf("an unwritable default state directory: %v; want the directory and --state-dir named", err)
	}
}
