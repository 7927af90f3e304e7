package token_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/callerauth/callerauth/internal/kit/tokenvolume"
	"github.com/callerauth/callerauth/token"
)

// TestFileDuringKubeletSwapStorm: the kubelet's AtomicWriter order — the
// new generation written, ..data renamed over, the previous generation
// removed at once — as fast as it goes, while readers call. A read that
// resolved ..data to the generation being removed used to fail "no such
// file or directory" (2–10 in ~300,000 reads); the source now resolves the
// path again, so a rotation never fails a call. Every read must also see
// one of the published tokens, whole.
func TestFileDuringKubeletSwapStorm(t *testing.T) {
	v, err := tokenvolume.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Publish("token-0"); err != nil {
		t.Fatal(err)
	}
	src := token.File(v.Path())
	const swaps = 3000
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer done.Store(true)
		for i := 1; i <= swaps; i++ {
			if err := v.Publish(fmt.Sprintf("token-%d", i)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var failed, reads atomic.Int64
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for !done.Load() {
				reads.Add(1)
				tok, err := src.Token(context.Background())
				if err != nil {
					if failed.Add(1) <= 3 {
						t.Errorf("read during a swap: %v", err)
					}
					continue
				}
				var n int
				if _, err := fmt.Sscanf(tok, "token-%d", &n); err != nil {
					t.Errorf("read %q: not a published token", tok)
				}
			}
		})
	}
	readers.Wait()
	wg.Wait()
	t.Logf("%d reads across %d swaps: %d failed", reads.Load(), swaps, failed.Load())
}
