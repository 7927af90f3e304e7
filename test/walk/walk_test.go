// Package walk_test runs the local walks of the operator docs — every
// fenced block marked "sh walk" in docs/pdp.md, docs/embedding.md, docs/proxy.md,
// docs/platform-connector.md, docs/vmafx.md and docs/deploy.md — with the real binaries, and checks that the
// output the docs show is
// the output the commands print ("# => " lines). A walk that rots fails
// here.
package walk_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/loopback"
)

var binDir string

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/callerauth", "cmd/callerauth-proxy", "cmd/empty-server", "cmd/pdp", "cmd/platform-connector", "cmd/vmafx-controller", "cmd/vmafx-node"}, func() (func(), error) {
		binDir = filepath.Dir(bins["pdp"])
		return nil, nil
	})
}

// walk extracts the "sh walk" blocks of a doc, in order.
func walk(t *testing.T, doc string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", doc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var script strings.Builder
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```sh walk":
			in = true
		case in && strings.TrimSpace(line) == "```":
			in = false
			script.WriteString("\n")
		case in:
			script.WriteString(line + "\n")
		}
	}
	if script.Len() == 0 {
		t.Fatalf("docs/%s has no ```sh walk block", doc)
	}
	return script.String()
}

var loopbackAddr = regexp.MustCompile(`127\.0\.0\.1:\d+`)

// run executes a walk from the repository root with the built binaries
// first on PATH, its fixed loopback ports replaced by free ones, and checks
// every "# verified…"/"# DENY…" line the doc shows against the output.
func run(t *testing.T, doc string) { runFor(t, doc, 3*time.Minute) }

// runFor is run with a time limit of its own.
func runFor(t *testing.T, doc string, limit time.Duration) {
	script := walk(t, doc)
	var exports []string
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "export ") && loopbackAddr.MatchString(line) {
			exports = append(exports, line)
		}
	}
	switch {
	case len(exports) == 1:
		free := loopbackAddr.ReplaceAllStringFunc(exports[0], func(string) string {
			a, err := loopback.Addr()
			if err != nil {
				t.Fatal(err)
			}
			return a
		})
		script = strings.Replace(script, exports[0], free, 1)
	case len(exports) > 1 || loopbackAddr.MatchString(script):
		t.Fatalf("docs/%s: want one export line with the walk's addresses, found %d", doc, len(exports))
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = filepath.Join("..", "..")
	// Short, and passable by every user (not listable), as /tmp is: a node
	// started under it (make cluster) gives pods hostPath volumes there, a
	// Unix socket among them (a path of at most 107 bytes).
	tmp, err := os.MkdirTemp("", "walk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	// A walk stops what it started: once the script has ended, nothing of
	// its process group may be left running. (Whatever is goes with the
	// group all the same.)
	left := syscall.Kill(-cmd.Process.Pid, 0) == nil
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("docs/%s walk failed: %v\n%s", doc, err, out.String())
	}
	if left {
		t.Errorf("docs/%s: the walk ended with processes it started still running; it must stop them (kill, then wait)", doc)
	}
	claims := 0
	for _, line := range strings.Split(script, "\n") {
		claim, ok := strings.CutPrefix(strings.TrimSpace(line), "# => ")
		if !ok {
			continue
		}
		claims++
		claim, _, _ = strings.Cut(claim, "…")
		if !strings.Contains(out.String(), strings.TrimSpace(claim)) {
			t.Errorf("docs/%s shows %q, which the walk did not print:\n%s", doc, claim, out.String())
		}
	}
	if claims == 0 {
		t.Fatalf("docs/%s walk shows no output to check", doc)
	}
}

func TestPDPWalk(t *testing.T) { run(t, "pdp.md") }

func TestPlatformConnectorWalk(t *testing.T) { run(t, "platform-connector.md") }

func TestVmafxWalk(t *testing.T) { run(t, "vmafx.md") }

func TestEmbeddingWalk(t *testing.T) { run(t, "embedding.md") }

func TestProxyWalk(t *testing.T) { run(t, "proxy.md") }

// TestDeployWalk starts make cluster (a node on this machine: root), which
// builds the images first.
func TestDeployWalk(t *testing.T) { runFor(t, "deploy.md", 10*time.Minute) }
