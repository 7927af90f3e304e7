package connector_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// TestRetryAfterACutPastTheCommit: the deployment role behind a proxy
// that lets a batch through and swallows the answer, then breaks the
// connection — the batch stored, the publisher told Unavailable. The
// retrying publisher sends the batch again under the same idempotency
// key: it is answered OK and stored once (0 lost, 0 duplicated), and the
// connector counts the retry as a duplicate.
func TestRetryAfterACutPastTheCommit(t *testing.T) {
	d := startDev(t)
	p, caFile := startDeployment(t, configJSON([]string{monitor}, "enforce", false), d.iss.KubeconfigFile())
	proxy, err := faults.NewProxy(p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	pub, err := connector.NewPublisher(credentials.Config{Address: proxy.Addr(), TLS: true, CAFile: caFile, ServerName: "localhost",
		TokenFile: d.token(t, "csp-health-monitor", "csp-retry", "node-b", aud)})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pub.Backoff, pub.MaxBackoff = 50*time.Millisecond, 200*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A first batch: the connection and the caller's verdict are warm.
	if err := pub.Publish(ctx, event("node-c")); err != nil {
		t.Fatal(err)
	}
	before := p.totals(t)

	batch := make([]*pcv1.HealthEvent, 3)
	for i := range batch {
		batch[i] = &pcv1.HealthEvent{Version: 1, Agent: "e2e", CheckName: "GpuXid", Message: fmt.Sprintf("cut-%d", i), NodeName: "node-d", IsFatal: true}
	}
	proxy.HoldReplies(true)
	done := make(chan error, 1)
	go func() { done <- pub.PublishRetrying(ctx, batch...) }()
	// The batch is stored while its answer is held.
	for deadline := time.Now().Add(10 * time.Second); countMessages(t, p, "cut-") < len(batch); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the batch never reached the datastore")
		}
	}
	proxy.Cut() // the answer is lost with the connection
	proxy.HoldReplies(false)
	if err := proxy.Mend(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the retrying publisher: %v", err)
	}
	if n := countMessages(t, p, "cut-"); n != len(batch) {
		t.Errorf("%d events of the batch stored; want %d, once each", n, len(batch))
	}
	after := p.totals(t)
	if d := after["platform_connector_duplicate_batches_total"] - before["platform_connector_duplicate_batches_total"]; d != 1 {
		t.Errorf("platform_connector_duplicate_batches_total moved by %g; want 1", d)
	}

	// Without a key (an old publisher), the same retry would store the
	// batch twice: that is what the key prevents.
	again := []*pcv1.HealthEvent{{Version: 1, Agent: "e2e", CheckName: "GpuXid", Message: "nokey-0", NodeName: "node-d"}}
	for range 2 {
		if err := pub.PublishKeyed(ctx, "", again...); err != nil {
			t.Fatal(err)
		}
	}
	if n := countMessages(t, p, "nokey-"); n != 2 {
		t.Errorf("an unkeyed batch sent twice is stored %d times; want 2", n)
	}
	// The same key with other events is refused, naming why.
	if err := pub.PublishKeyed(ctx, "k-fixed", again...); err != nil {
		t.Fatal(err)
	}
	if err := pub.PublishKeyed(ctx, "k-fixed", batch[0]); err == nil || !strings.Contains(err.Error(), "idempotency_key") {
		t.Errorf("a key reused for other events: %v", err)
	}
}

// countMessages counts the stored events whose message starts with prefix.
func countMessages(t *testing.T, p *proc, prefix string) int {
	t.Helper()
	n := 0
	for _, e := range p.stored(t) {
		if strings.HasPrefix(e.Event.GetMessage(), prefix) {
			n++
		}
	}
	return n
}

// TestKeysBelongToThePod: two pods of one service account sending the same
// idempotency key with the same events are two batches — both stored —
// because a key belongs to the bound identity (the pod's UID), not to the
// service account (before, the second was answered as a duplicate and
// silently not stored); one pod's retry is still a duplicate.
func TestKeysBelongToThePod(t *testing.T) {
	d := startDev(t)
	p, caFile := startDeployment(t, configJSON([]string{monitor}, "enforce", false), d.iss.KubeconfigFile())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	batch := []*pcv1.HealthEvent{{Version: 1, Agent: "e2e", CheckName: "GpuXid", Message: "same-key", NodeName: "node-d", IsFatal: true}}
	for _, pod := range []string{"csp-pod-a", "csp-pod-b", "csp-pod-a"} {
		pub, err := connector.NewPublisher(credentials.Config{Address: p.addr, TLS: true, CAFile: caFile, ServerName: "localhost",
			TokenFile: d.token(t, "csp-health-monitor", pod, "node-b", aud)})
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.PublishKeyed(ctx, "batch-1", batch...); err != nil {
			t.Fatalf("%s: %v", pod, err)
		}
		_ = pub.Close()
	}
	if n := countMessages(t, p, "same-key"); n != 2 {
		t.Fatalf("%d events stored; want 2 (one per pod; the first pod's retry a duplicate)", n)
	}
}
