// Package devissuertest runs a dev issuer for a test, as net/http/httptest
// runs a server: a fresh state directory, served over HTTPS on a loopback
// port it picks, closed when the test ends.
package devissuertest

import (
	"testing"

	"github.com/callerauth/callerauth/devissuer"
)

// Serve opens a dev issuer in a temporary state directory and serves it on
// 127.0.0.1, port chosen by the kernel. Its KubeconfigFile points at the
// running server. Both are closed when the test ends.
func Serve(t testing.TB, cfg devissuer.Config) (*devissuer.Issuer, *devissuer.Server) {
	t.Helper()
	iss, err := devissuer.Open(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return iss, srv
}
