package translog_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
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

// BenchmarkFileSync is the floor under any log that syncs before it
// answers: 12 KB (a transaction of four entries) written to a file on the
// test's disk and synced, appended and fsync'd, or written over what was
// written before and fdatasync'd (no size or block to record), in the
// process's CPU (the kernel's part of a sync is the caller's).
func BenchmarkFileSync(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 12000)
	for _, mode := range []string{"append+fsync", "overwrite+fdatasync"} {
		b.Run(mode, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "log"))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			const span = 64 << 20
			if mode == "overwrite+fdatasync" {
				if _, err := f.Write(make([]byte, span)); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			cpu := cost.CPU()
			var off int64
			for b.Loop() {
				if mode == "overwrite+fdatasync" && off+int64(len(data)) > span {
					off = 0
				}
				if _, err := f.WriteAt(data, off); err != nil {
					b.Fatal(err)
				}
				off += int64(len(data))
				if mode == "append+fsync" {
					err = f.Sync()
				} else {
					err = syscall.Fdatasync(int(f.Fd()))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cost.CPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}
