package connector_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/internal/kit/cost"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// TestBatchCostIsLinearInItsBytes: the worst batch shapes — the most
// events a batch may carry, each minimal; the largest message; many
// events of a few KiB; a batch refused for its key; one refused by the
// quota — each cost at most maxAllocPerByte bytes allocated per request
// byte, stored or refused (docs/reliability.md lists the figures; CPU is
// reported, not asserted).
func TestBatchCostIsLinearInItsBytes(t *testing.T) {
	const maxAllocPerByte = 256 // docs/reliability.md: ~2.2 KB an event of 13 bytes
	sock := filepath.Join(t.TempDir(), "pc.sock")
	run(t, func(o *connector.Options) { o.Socket, o.QuotaEvents = sock, 3000 }, "", nil)
	c := dialSocket(t, sock)
	ctx := context.Background()
	keyed := func(b *pcv1.HealthEvents, key string) *pcv1.HealthEvents { b.IdempotencyKey = key; return b }
	for _, s := range []struct {
		name  string
		batch *pcv1.HealthEvents
	}{
		{"1,000 minimal events", events(1000, "")},
		{"one message of 3 MiB", events(1, strings.Repeat("m", 3<<20))},
		{"1,000 events of 3 KiB", events(1000, strings.Repeat("m", 3<<10))},
		{"a key no batch may carry", keyed(events(1000, strings.Repeat("m", 1<<10)), "bad key!")},
		{"past the caller's quota", events(1000, strings.Repeat("m", 1<<10))},
	} {
		size := proto.Size(s.batch)
		var err error
		bytes, cpu := cost.Of(func() { _, err = c.HealthEventOccurredV1(ctx, s.batch) })
		per := float64(bytes) / float64(size)
		t.Logf("%s: %d bytes asked (%v), %d allocated: %.1f a request byte; CPU %.2f µs a KiB", s.name, size, err, bytes, per, float64(cpu.Microseconds())/float64(size)*1024)
		if per > maxAllocPerByte {
			t.Errorf("%s: %.1f bytes allocated a request byte; the bound is %d", s.name, per, maxAllocPerByte)
		}
	}
}
