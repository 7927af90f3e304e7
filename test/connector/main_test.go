// Package connector_test starts the real platform-connector binary in both
// roles, against the dev issuer and a real kube-apiserver, and sends events
// through the publisher client.
package connector_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/callerauth/callerauth/test/kubeapi"
)

var (
	binary    string
	apiserver *kubeapi.Server
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "connector-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "platform-connector")
	build := exec.Command("go", "build", "-o", binary, "github.com/callerauth/callerauth/cmd/platform-connector")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "test/connector: building platform-connector:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	apiserver, err = kubeapi.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/connector: cannot start the kube-apiserver these tests need:", err)
		return 1
	}
	defer apiserver.Stop()
	return m.Run()
}
