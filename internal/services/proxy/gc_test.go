package proxy_test

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/callerauth/callerauth/internal/services/proxy"
)

// TestGCPercent: the proxy's collector target is DefaultGCPercent while
// $GOGC is unset, and $GOGC's when it is set.
func TestGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	t.Setenv("GOGC", "")
	if got := proxy.SetGCPercent(); got != 100 {
		t.Errorf("GOGC set (empty, as Go reads it: 100 stays): %d", got)
	}
	// t.Setenv restores the variable; unset it for this case.
	unsetenv(t, "GOGC")
	if got := proxy.SetGCPercent(); got != proxy.DefaultGCPercent {
		t.Errorf("GOGC unset: %d, want %d", got, proxy.DefaultGCPercent)
	}
}

func unsetenv(t *testing.T, name string) {
	t.Helper()
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
