// Package connector_test starts the real platform-connector binary in both
// roles, against the dev issuer and a real kube-apiserver, and sends events
// through the publisher client.
package connector_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/callerauth/callerauth/test/e2e"
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
	bins, err := e2e.Build(dir, "cmd/platform-connector")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/connector:", err)
		return 1
	}
	binary = bins["platform-connector"]
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
