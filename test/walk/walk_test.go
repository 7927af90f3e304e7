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
	"slices"
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
func run(t *testing.T, doc string) { runFor(t, doc, 3*time.Minute, nil) }

// newcomer is how a walk runs for someone who has only the repository:
// in a copy of its tracked files (nothing the test built beside them), in
// an environment with no TMPDIR and none of the built binaries on PATH,
// with a .cache holding only what make builds there for good (the
// node's binaries: a newcomer's make builds them) — no cluster's state,
// no CLI. Each "# => " line must be a whole line the walk printed (or its
// beginning, where the line ends in "…").
type newcomer struct{ dir string }

// newcomerTree copies the repository's tracked files to a directory of
// its own and links .cache's tool builds into an otherwise empty .cache.
func newcomerTree(t *testing.T) *newcomer {
	t.Helper()
	root := filepath.Join("..", "..")
	dir, err := os.MkdirTemp("", "newcomer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	files, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimSuffix(string(files), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := filepath.Abs(filepath.Join(root, ".cache"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if e.Name() == "cluster" || !e.IsDir() {
			continue // a cluster's state is no build of make's
		}
		if err := os.Symlink(filepath.Join(cache, e.Name()), filepath.Join(dir, ".cache", e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return &newcomer{dir: dir}
}

// runFor is run with a time limit of its own; as n, when n is set.
func runFor(t *testing.T, doc string, limit time.Duration, n *newcomer) {
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
	if n != nil {
		cmd.Dir = n.dir
	}
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
	if n != nil {
		cmd.Env = nil
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "PATH=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		var path []string
		for _, p := range filepath.SplitList(os.Getenv("PATH")) {
			if p != binDir {
				path = append(path, p)
			}
		}
		cmd.Env = append(cmd.Env, "PATH="+strings.Join(path, string(os.PathListSeparator)))
		if _, err := exec.LookPath("callerauth"); err == nil && !strings.HasPrefix(mustLook("callerauth"), binDir) {
			t.Fatalf("a callerauth is on this machine's PATH (%s): the newcomer's walk must build its own", mustLook("callerauth"))
		}
	}
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
	printed := map[string]bool{}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		printed[strings.TrimSpace(l)] = true
		lines = append(lines, strings.TrimSpace(l))
	}
	for _, line := range strings.Split(script, "\n") {
		claim, ok := strings.CutPrefix(strings.TrimSpace(line), "# => ")
		if !ok {
			continue
		}
		claims++
		whole := !strings.HasSuffix(claim, "…")
		claim, _, _ = strings.Cut(claim, "…")
		claim = strings.TrimSpace(claim)
		switch {
		case n != nil && whole && !printed[claim]:
			t.Errorf("docs/%s shows %q, which is not a whole line the walk printed (end a line shown in part with …):\n%s", doc, claim, out.String())
		case n != nil && !whole && !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, claim) }):
			t.Errorf("docs/%s shows %q…, which begins no line the walk printed:\n%s", doc, claim, out.String())
		case !strings.Contains(out.String(), claim):
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
// builds the images first — as a newcomer would run the page: in a copy
// of the repository with no TMPDIR, no callerauth on PATH and a .cache
// holding only make's tool builds (newcomer). The page of ae46db4, run
// so, failed at its first callerauth command (command not found) and
// wrote its log to /cluster.log (TMPDIR empty), as the outside look found.
func TestDeployWalk(t *testing.T) { runFor(t, "deploy.md", 15*time.Minute, newcomerTree(t)) }

func mustLook(name string) string {
	p, _ := exec.LookPath(name)
	return p
}
