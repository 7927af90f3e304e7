package version

import (
	"runtime"
	"strings"
	"testing"
)

// TestInfo: the build information names the Go that built the binary and
// a version.
func TestInfo(t *testing.T) {
	i := Get()
	if i.Go != runtime.Version() || i.Version == "" || i.Revision == "" {
		t.Fatalf("%+v; want the Go version %s, a version and a revision", i, runtime.Version())
	}
	if s := i.String(); !strings.Contains(s, i.Version) || !strings.Contains(s, i.Go) {
		t.Fatalf("String() = %q", s)
	}
	if got := (Info{Version: "v1.2.3", Revision: "abc", Dirty: true, Go: "go1.26.8"}).String(); got != "v1.2.3 (revision abc, dirty) go1.26.8" {
		t.Fatalf("String() = %q", got)
	}
}
