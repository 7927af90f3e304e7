package translog_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/kit/cost"
)

// BenchmarkAppend appends batches of 3 KB entries (about a signed check
// answer) to an SQLite log: the store's cost an entry, by batch size, on
// the clock and in the process's CPU.
func BenchmarkAppend(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 3000)
	for _, batch := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			skey, _ := newKey(&testing.T{})
			l, _ := open(&testing.T{}, filepath.Join(b.TempDir(), "log.db"), skey, nil)
			es := make([]translog.Entry, batch)
			for i := range es {
				es[i] = translog.Entry{Data: data, At: time.Now(), Caller: fmt.Sprintf("system:serviceaccount:ns:c%d", i%10), System: "secrets-engine", Allowed: true}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cost.CPU()
			for b.Loop() {
				if _, err := l.Append(context.Background(), es...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch)/1e3, "µs/entry")
			b.ReportMetric(float64(cost.CPU()-cpu)/float64(b.N*batch)/1e3, "cpu-µs/entry")
		})
	}
}
