package connector_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/kit/testjwt"
	"github.com/callerauth/callerauth/internal/services/connector"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
)

// BenchmarkBatch sends a batch of 10 events through the real server over
// its Unix socket, stored in SQLite (one transaction, synchronous=FULL),
// with node-binding auth on a cached verdict beside the same batch with
// auth disabled. The difference is what authentication costs a batch.
func BenchmarkBatch(b *testing.B) {
	for _, enabled := range []bool{false, true} {
		name := "auth-disabled"
		if enabled {
			name = "auth-cached"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			cfg := `{"enableNodeBindingAuth": false}`
			if enabled {
				cfg = `{"enableNodeBindingAuth": true, "AuthAudience": "pc", "AuthCrossNodeServiceAccounts": []}`
			}
			caller := &authn.Caller{Username: "system:serviceaccount:nvsentinel:gpu-health-monitor", PodName: "p", NodeName: "node-a", Expiry: time.Now().Add(time.Hour)}
			o := options(b, cfg)
			o.Socket, o.Datastore = filepath.Join(dir, "pc.sock"), filepath.Join(dir, "events.db")
			s := newServer(b, o, authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) { return caller, nil }))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() { cancel(); <-done }()
			for i := 0; ; i++ {
				if _, err := os.Stat(filepath.Join(dir, "pc.sock")); err == nil {
					break
				}
				if i > 200 {
					b.Fatal("socket never appeared")
				}
				time.Sleep(10 * time.Millisecond)
			}
			tok := filepath.Join(dir, "token")
			if err := os.WriteFile(tok, []byte(testjwt.Expiring(caller.Username, time.Now().Add(time.Hour))), 0o600); err != nil {
				b.Fatal(err)
			}
			pub, err := connector.NewPublisher(credentials.Config{Address: "unix://" + filepath.Join(dir, "pc.sock"), TokenFile: tok})
			if err != nil {
				b.Fatal(err)
			}
			defer pub.Close()
			batch := make([]*pcv1.HealthEvent, 10)
			for i := range batch {
				batch[i] = &pcv1.HealthEvent{Version: 1, Agent: "bench", CheckName: "GpuXid", Message: "xid 79", ErrorCode: []string{"79"}, Metadata: map[string]string{"gpu": "0"}}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := pub.Publish(context.Background(), batch...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
