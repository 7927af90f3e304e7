package cli_test

import (
	"context"
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/servicetest"
	"github.com/callerauth/callerauth/internal/services/connector"
)

func TestPublish(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"enableNodeBindingAuth": false}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "pc.sock")
	o := connector.NewOptions("node-a")
	o.ConfigFile, o.Socket, o.Datastore, o.Serve.MetricsListen, o.Serve.LogOutput = cfg, sock, filepath.Join(dir, "events.db"), "", io.Discard
	s := servicetest.New(t, o, nil, connector.New)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := execute(context.Background(), t, "", time.Time{}, "publish", "--address", "unix://"+sock, "--check-name", "GpuXid", "--fatal")
	if r.err != nil || !strings.Contains(r.stdout.String(), "accepted") {
		t.Fatalf("publish: %v %s", r.err, r.stdout.String())
	}
	stored, err := s.Store().List(context.Background(), "", 0)
	if err != nil || len(stored) != 1 || stored[0].Node != "node-a" || stored[0].Event.GetCheckName() != "GpuXid" || !stored[0].Event.GetIsFatal() {
		t.Fatalf("stored %+v %v", stored, err)
	}

	// Nothing listens: --retry keeps trying on Unavailable, then gives up.
	r = execute(context.Background(), t, "", time.Time{}, "publish", "--address", "unix://"+filepath.Join(dir, "none.sock"), "--retry", "500ms")
	if r.err == nil || !strings.Contains(r.err.Error(), "gave up retrying") {
		t.Fatalf("retry: %v", r.err)
	}
	// A TLS connector reached without --tls: the error says to pass it.
	ca, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := ca.ServerTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := tls.Listen("tcp", "127.0.0.1:0", tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	tlsServer := grpc.NewServer()
	go func() { _ = tlsServer.Serve(tl) }()
	defer tlsServer.Stop()
	r = execute(context.Background(), t, "", time.Time{}, "publish", "--address", tl.Addr().String())
	if r.err == nil || !strings.Contains(r.err.Error(), "it serves TLS; pass --tls") {
		t.Fatalf("TLS server, no --tls: %v", r.err)
	}
	// A token over plaintext TCP is refused before anything is sent.
	r = execute(context.Background(), t, "", time.Time{}, "publish", "--address", "127.0.0.1:1", "--token-file", "/dev/null")
	if r.err == nil || !strings.Contains(r.err.Error(), "needs tls: true") {
		t.Fatalf("plaintext: %v", r.err)
	}
}
