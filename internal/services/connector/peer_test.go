package connector_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// TestMain lets the test binary act as a tokenless publisher process of
// its own (TestTokenlessCallersKeepTheirOwnKeys).
func TestMain(m *testing.M) {
	if sock := os.Getenv("CONNECTOR_TEST_PUBLISH_TO"); sock != "" {
		os.Exit(publishOnce(sock))
	}
	os.Exit(m.Run())
}

// publishOnce sends one keyed batch to the socket, twice (a retry), and
// says how it went through the exit code.
func publishOnce(sock string) int {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer conn.Close()
	c := pcv1.NewPlatformConnectorClient(conn)
	batch := &pcv1.HealthEvents{IdempotencyKey: "same-key", Events: []*pcv1.HealthEvent{{NodeName: "node-a", CheckName: "c", Message: "tokenless"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := c.HealthEventOccurredV1(ctx, batch); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// TestTokenlessCallersKeepTheirOwnKeys: callers without a token (node
// binding off) each have their own idempotency keys — their process, as
// the kernel names it on the socket (SO_PEERCRED) — so two publisher
// processes sending the same key and events are two batches, both stored,
// while each one's retry is a duplicate (before, every tokenless caller
// shared one namespace: the second process's batch was silently dropped).
func TestTokenlessCallersKeepTheirOwnKeys(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pc.sock")
	r := run(t, func(o *connector.Options) { o.Socket = sock }, "", nil)
	dialSocket(t, sock) // the socket is there
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CONNECTOR_TEST_PUBLISH_TO="+sock)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("a publisher process: %v\n%s", err, out)
		}
	}
	got, err := r.s.Store().List(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d events stored; want 2 (one per publisher process, each one's retry a duplicate)", len(got))
	}
}
