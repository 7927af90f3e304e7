package translog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/cost"
)

// BenchmarkAdd adds 3 KB entries (about a signed check answer) from 1, 8
// and 64 goroutines under each durability — each waiting for its entry
// under DurableGroups, none under DurableCheckpoints (as the decision
// log's modes required and best-effort do):
// the log's cost an entry, on the clock and in the process's CPU (the
// kernel's part of a write and a sync included). DurableCheckpoints
// lingers 10 ms, as the decision log's best-effort mode does.
func BenchmarkAdd(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 3000)
	for _, d := range []Durability{DurableGroups, DurableCheckpoints} {
		for _, conc := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/%d", d, conc), func(b *testing.B) {
				cfg := Config{Dir: b.TempDir(), Key: testKey(b, "example.com/bench"), Durability: d}
				if d == DurableCheckpoints {
					cfg.Linger = 10 * time.Millisecond
				}
				r := start(b, cfg)
				b.ReportAllocs()
				cpu := cost.CPU()
				var wg sync.WaitGroup
				work := make(chan struct{}, conc)
				for range conc {
					wg.Go(func() {
						var last Group
						n := 0
						for range work {
							last = r.AddAll([][]byte{data})
							if n++; d == DurableCheckpoints && n%128 != 0 {
								continue // nobody waits, as under best-effort (but the queue stays within its bound)
							}
							if _, err := last.Wait(context.Background(), 0); err != nil {
								b.Error(err)
								return
							}
						}
						if last.g != nil {
							if _, err := last.Wait(context.Background(), 0); err != nil {
								b.Error(err)
							}
						}
					})
				}
				for b.Loop() {
					work <- struct{}{}
				}
				close(work)
				wg.Wait()
				b.ReportMetric(float64(cost.CPU()-cpu)/float64(b.N)/1e3, "cpu-µs/entry")
			})
		}
	}
}

// BenchmarkFileSync is the floor under any log that syncs before it
// answers: 12 KB (a group of four entries) written to a file on the
// test's disk and synced, appended and fsync'd, or written over what was
// written before and fdatasync'd (no size or block to record): its time
// on the clock is the disk's sync latency, which bounds what one log
// answers under DurableGroups (connections ÷ latency), and its CPU the
// kernel's part of a sync, which the caller pays.
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
