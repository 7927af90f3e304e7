// Package e2e is what the end-to-end tests under test/ share to run the
// real binaries: building them once per test binary, and loopback
// addresses for them to listen on.
package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
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
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("e2e: go build %v: %w", pkgs, err)
	}
	return out, nil
}

// LoopbackAddr returns a 127.0.0.1 address whose port was free a moment
// ago. A process started on it may still lose the race for the port to
// another; a binary that can listen on port 0 and report its address
// should be started that way instead.
func LoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("e2e: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
