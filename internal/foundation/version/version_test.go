package version

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestInfo: the build information names the Go that built the binary and
// a version, and the gauge is 1 labelled with them.
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector("x"))
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "x_build_info" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("x_build_info: %v %v", mfs, err)
	}
}
