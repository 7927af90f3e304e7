package connector_test

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/connector"
)

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// sendTLS publishes to the deployment role over TLS.
func sendTLS(t *testing.T, p *proc, caFile, tokenFile string, nodes ...string) outcome {
	t.Helper()
	pub, err := connector.NewPublisher(credentials.Config{Address: p.addr, TLS: true, CAFile: caFile, ServerName: "localhost", TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	before, n := p.metricsNow(t), len(p.stored(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = pub.Publish(ctx, events(nodes...)...)
	st := status.Convert(err)
	o := outcome{code: st.Code(), moved: deltas(before, p.metricsNow(t))}
	if err != nil {
		o.reason = st.Message()
	}
	for _, e := range p.stored(t)[n:] {
		o.stored = append(o.stored, e.Node)
	}
	if o.code == codes.Unknown {
		t.Logf("publish: %v", err)
	}
	return o
}
