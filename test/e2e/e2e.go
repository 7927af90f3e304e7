// Package e2e is what the end-to-end tests under test/ share to run the
// real binaries: building them once per test binary, starting them,
// reading the addresses they bound from their logs, and stopping them with
// SIGTERM, their output logged when a test fails.
package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/capture"
)

// Module is the import path of the callerauth module.
const Module = "github.com/callerauth/callerauth"

// Build compiles the main packages (paths inside the module, as
// "cmd/pdp") into dir, in one go command, and returns each binary's path
// by its base name ("pdp").
func Build(dir string, pkgs ...string) (map[string]string, error) {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	out := map[string]string{}
	for _, p := range pkgs {
		args = append(args, Module+"/"+p)
		out[path.Base(p)] = filepath.Join(dir, path.Base(p))
	}
	cmd := exec.Command("go", args...) //nolint:gosec // builds the module's own packages.
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("e2e: go build %v: %w", pkgs, err)
	}
	return out, nil
}

// Process is a service binary running under a test.
type Process struct {
	Name string
	cmd  *exec.Cmd
	out  *capture.Buffer
	done chan struct{}
	err  error // the exit, once done is closed
}

// Start runs bin with args (and extra environment variables), its standard
// output and error captured together. When the test ends the process is
// stopped with SIGTERM (then SIGKILL after 10 s), and if the test failed
// its output is logged.
func Start(t testing.TB, bin string, args []string, env ...string) *Process {
	t.Helper()
	p := &Process{Name: filepath.Base(bin), out: &capture.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...) //nolint:gosec // a binary the test built, with the test's arguments.
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("e2e: starting %s: %v", bin, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", p.Name, p.Output())
		}
	})
	return p
}

// Output is what the process has written so far.
func (p *Process) Output() string { return p.out.String() }

// Stop sends SIGTERM, waits up to 10 s, then kills, and returns the exit
// error (nil for a clean exit).
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// Exited waits up to timeout for the process to exit by itself and returns
// its exit code; ok is false when it is still running.
func (p *Process) Exited(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// LogValue waits (up to timeout) for a JSON log line whose msg is msg and
// returns its key attribute as a string — the address a service bound to
// port 0, say. It fails the test when the process exits or time runs out.
func (p *Process) LogValue(t testing.TB, msg, key string, timeout time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(p.Output(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
				continue
			}
			if v, ok := m[key]; ok {
				return fmt.Sprint(v)
			}
		}
		select {
		case <-p.done:
			t.Fatalf("e2e: %s exited (%v) before logging %q", p.Name, p.err, msg)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: %s logged no %q with %q in %s", p.Name, msg, key, timeout)
		}
	}
}

// Signal sends sig to the process (SIGKILL: a node dying mid-job).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Pid is the process's id (to change its resource limits, say).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Main is a test binary's TestMain: it builds pkgs into a temporary
// directory (their paths by base name in *bins; bins may be nil when pkgs
// is empty), runs each of before — a kube-apiserver, say — which returns
// how to stop what it started, runs the tests, stops everything in reverse
// and removes the binaries, and exits with the tests' code: 1, naming the
// cause, when a step before the tests fails.
func Main(m *testing.M, bins *map[string]string, pkgs []string, before ...func() (stop func(), err error)) {
	os.Exit(run(m, bins, pkgs, before))
}

func run(m *testing.M, bins *map[string]string, pkgs []string, before []func() (func(), error)) int {
	if len(pkgs) > 0 {
		dir, err := os.MkdirTemp("", "e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		if *bins, err = Build(dir, pkgs...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	for _, b := range before {
		stop, err := b()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: before the tests:", err)
			return 1
		}
		if stop != nil {
			defer stop()
		}
	}
	return m.Run()
}
