// The example programs, built as a user builds them (stripped, -trimpath)
// and run against the dev issuer: each client asserts its own outcome
// (-expect), this test only starts them and says which to expect. The
// binaries' sizes are held to docs/embedding.md's table.
package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
)

// programs are the examples, by their path under examples/.
var programs = []string{"grpc/server", "grpc/client", "http/server", "http/client", "compare/controller-runtime-filter"}

// sizeBudget is the issue-41 bound: the guarded gRPC server with
// authn/kube at most a third of the 81 MB hello-world of before.
const sizeBudget = 81_000_000 / 3

var (
	binDir   string
	buildAll = sync.OnceValues(func() (map[string]string, error) {
		bins := map[string]string{}
		for _, p := range programs {
			out := filepath.Join(binDir, strings.ReplaceAll(p, "/", "-"))
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./"+p)
			if b, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("go build ./examples/%s: %w\n%s", p, err, b)
			}
			bins[p] = out
		}
		return bins, nil
	})
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "callerauth-examples-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(binDir)
	os.Exit(code)
}

// build is each program's binary, built once for every test.
func build(t *testing.T) map[string]string {
	t.Helper()
	bins, err := buildAll()
	if err != nil {
		t.Fatal(err)
	}
	return bins
}

// fixture is a dev issuer serving TokenReview, discovery and keys, a
// serving certificate from its CA, and the callers' token files.
type fixture struct {
	iss        *devissuer.Issuer
	url        string
	cert, key  string
	tokens     map[string]string // caller → token file
	tokenDir   string
	kubeconfig string
}

const audience = "example"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	dir := t.TempDir()
	cert, key, err := iss.IssueServingCert(dir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{iss: iss, url: srv.URL, cert: cert, key: key, tokens: map[string]string{}, tokenDir: dir, kubeconfig: iss.KubeconfigFile()}
	for name, req := range map[string]devissuer.TokenRequest{
		"reader":         {Namespace: "demo", ServiceAccount: "client", Audiences: []string{audience}},
		"intruder":       {Namespace: "demo", ServiceAccount: "intruder", Audiences: []string{audience}},
		"other-audience": {Namespace: "demo", ServiceAccount: "client", Audiences: []string{"another-service"}},
		"expired":        {Namespace: "demo", ServiceAccount: "client", Audiences: []string{audience}, IssuedAt: time.Now().Add(-2 * time.Hour)},
	} {
		tok, err := iss.Mint(req)
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[name] = filepath.Join(dir, name+".token")
		if err := os.WriteFile(f.tokens[name], []byte(tok.Token), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// start runs a server program until the test ends and returns the
// address it printed.
func start(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", filepath.Base(bin), stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, "serving on ")
		if !ok || !found {
			t.Fatalf("%s did not say where it serves (%q): %s", filepath.Base(bin), l, stderr.String())
		}
		return addr
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start within 30 s: %s", filepath.Base(bin), stderr.String())
		return ""
	}
}

// call runs a client program, which exits 0 only when its outcome is the
// one -expect names.
func call(t *testing.T, bin string, want string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append(args, "-expect", want)...).CombinedOutput()
	if err != nil {
		t.Errorf("%s %s, expecting %q: %v\n%s", filepath.Base(bin), strings.Join(args, " "), want, err, out)
		return
	}
	t.Logf("%s: %s", want, bytes.TrimSpace(out))
}

// refusedBeforeSending runs a client with an expired token: the client
// refuses it itself, naming the file and the expiry.
func refusedBeforeSending(t *testing.T, bin, file string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, append(args, "-token-file", file)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), file) || !strings.Contains(string(out), "expired") {
		t.Errorf("an expired token: want the client to refuse it naming %s and the expiry; got %v: %s", file, err, out)
	}
}

func TestGRPCExample(t *testing.T) {
	bins := build(t)
	f := newFixture(t)
	addr := start(t, bins["grpc/server"], "-kubeconfig", f.kubeconfig, "-audience", audience, "-reader", "demo:client", "-cert", f.cert, "-key", f.key)
	client := bins["grpc/client"]
	base := []string{"-address", addr, "-ca", f.iss.CAFile()}
	before := f.iss.Reviews()
	call(t, client, "accepted SERVING", append(base, "-token-file", f.tokens["reader"])...)
	reviewed := f.iss.Reviews() - before
	call(t, client, "accepted SERVING", append(base, "-token-file", f.tokens["reader"])...)
	if again := f.iss.Reviews() - before - reviewed; reviewed != 1 || again != 0 {
		t.Errorf("TokenReviews: %d for the first call (want 1), %d for the second with the same token (want 0: the verdict is cached)", reviewed, again)
	}
	call(t, client, "refused role_missing", append(base, "-token-file", f.tokens["intruder"])...)
	call(t, client, "refused token_invalid", append(base, "-token-file", f.tokens["other-audience"])...)
	call(t, client, "refused token_missing", base...)
	refusedBeforeSending(t, client, f.tokens["expired"], base...)
}

func TestHTTPExample(t *testing.T) {
	bins := build(t)
	f := newFixture(t)
	addr := start(t, bins["http/server"], "-issuer", f.iss.Issuer(), "-discovery-url", f.url, "-issuer-ca", f.iss.CAFile(),
		"-audience", audience, "-reader", "demo:client", "-cert", f.cert, "-key", f.key)
	client := bins["http/client"]
	base := []string{"-url", "https://" + addr + "/hello", "-ca", f.iss.CAFile()}
	before := f.iss.Reviews()
	call(t, client, "accepted hello system:serviceaccount:demo:client", append(base, "-token-file", f.tokens["reader"])...)
	call(t, client, "refused role_missing", append(base, "-token-file", f.tokens["intruder"])...)
	call(t, client, "refused token_invalid", append(base, "-token-file", f.tokens["other-audience"])...)
	call(t, client, "refused token_missing", base...)
	refusedBeforeSending(t, client, f.tokens["expired"], base...)
	if n := f.iss.Reviews() - before; n != 0 {
		t.Errorf("the offline server made %d TokenReviews; it verifies against the issuer's keys alone", n)
	}
}

// authLines counts a program's lines of authentication code: the
// block a "// callerauth:" (or "// controller-runtime:") comment opens,
// to the first blank line, and each line marked "// callerauth" — code
// lines only, comments and braces-only lines included as gofmt writes them.
func authLines(t *testing.T, program string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(program, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	n, in := 0, false
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "// callerauth:") || strings.HasPrefix(l, "// controller-runtime:"):
			in = true
		case in && l == "":
			in = false
		case in && !strings.HasPrefix(l, "//"):
			n++
		case !in && strings.HasSuffix(l, "// callerauth"):
			n++
		}
	}
	return n
}

// TestDocumentedFigures holds docs/embedding.md's table to the programs:
// each one's lines of authentication code exactly, its stripped size
// within a tenth (Go releases move it), and the guarded gRPC server to
// the budget.
func TestDocumentedFigures(t *testing.T) {
	bins := build(t)
	doc, err := os.ReadFile("../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `examples/([a-z/-]+)` \\|.*\\| ([0-9]+) \\| ([0-9.]+) MB \\|$")
	type figures struct {
		lines int
		mb    float64
	}
	stated := map[string]figures{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		lines, _ := strconv.Atoi(m[2])
		mb, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		stated[m[1]] = figures{lines, mb}
	}
	for _, p := range programs {
		st, err := os.Stat(bins[p])
		if err != nil {
			t.Fatal(err)
		}
		mb, lines := float64(st.Size())/1e6, authLines(t, p)
		t.Logf("examples/%s: %d lines of authentication code, %.1f MB stripped", p, lines, mb)
		want, ok := stated[p]
		switch {
		case !ok:
			t.Errorf("docs/embedding.md has no row for examples/%s (%d lines, %.1f MB)", p, lines, mb)
			continue
		case lines == 0:
			t.Errorf("examples/%s marks no authentication code", p)
		case lines != want.lines:
			t.Errorf("examples/%s has %d lines of authentication code; docs/embedding.md says %d", p, lines, want.lines)
		}
		if mb < want.mb*0.9 || mb > want.mb*1.1 {
			t.Errorf("examples/%s is %.1f MB stripped; docs/embedding.md says %.1f MB", p, mb, want.mb)
		}
	}
	if st, err := os.Stat(bins["grpc/server"]); err == nil && st.Size() > sizeBudget {
		t.Errorf("the guarded gRPC server is %s; the budget is %s (a third of 81 MB)", fmtMB(st.Size()), fmtMB(sizeBudget))
	}
}

func fmtMB(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
