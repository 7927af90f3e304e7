package translog

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/callerauth/callerauth/internal/kit/cost"
)

// BenchmarkAdd adds 3 KB entries (about a signed check answer) from 1, 8
// and 64 goroutines, each waiting for its entry, under each durability:
// the log's cost an entry, on the clock and in the process's CPU (the
// kernel's part of a write and a sync included).
func BenchmarkAdd(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 3000)
	for _, d := range []Durability{DurableGroups, DurableCheckpoints} {
		for _, conc := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/%d", d, conc), func(b *testing.B) {
				r := start(b, Config{Dir: b.TempDir(), Key: testKey(b, "example.com/bench"), Durability: d})
				b.ReportAllocs()
				cpu := cost.CPU()
				var wg sync.WaitGroup
				work := make(chan struct{}, conc)
				for range conc {
					wg.Go(func() {
						for range work {
							if _, err := r.Add(data)(); err != nil {
								b.Error(err)
								return
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
