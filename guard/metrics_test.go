package guard_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/guard"
)

// TestModeGauge: <prefix>_auth_mode says which mode runs — 1 for it, 0 for
// the other — so that an alert can single out violations let through.
func TestModeGauge(t *testing.T) {
	for _, mode := range []guard.Mode{guard.Enforce, guard.Audit} {
		reg := prometheus.NewRegistry()
		if _, err := guard.NewMetrics(reg, guard.MetricsConfig{Prefix: "svc", Mode: mode}); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "svc_auth_mode" {
				continue
			}
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		other := guard.Audit
		if mode == guard.Audit {
			other = guard.Enforce
		}
		if got[string(mode)] != 1 || got[string(other)] != 0 || len(got) != 2 {
			t.Errorf("mode %s: svc_auth_mode %v", mode, got)
		}
	}
}
