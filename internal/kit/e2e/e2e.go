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
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/proc"
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
	*proc.Process
}

// Start runs bin with args (and extra environment variables), its standard
// output and error captured together. When the test ends the process is
// stopped with SIGTERM (then SIGKILL after 10 s), and if the test failed
// its output is logged.
func Start(t testing.TB, bin string, args []string, env ...string) *Process {
	t.Helper()
	pp, err := proc.Start(proc.Spec{Bin: bin, Args: args, Env: env})
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	p := &Process{pp}
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", p.Name, p.Output())
		}
	})
	return p
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
		case <-p.Done():
			t.Fatalf("e2e: %s exited (%v) before logging %q", p.Name, p.Err(), msg)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: %s logged no %q with %q in %s", p.Name, msg, key, timeout)
		}
	}
}

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
