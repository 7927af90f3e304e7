// Package scrape reads a Prometheus registry the way the tests and the
// demo compare metrics: every counter and gauge as "name{v1,v2}" (its label
// values in the order of their names; "name" without labels) → value, and a
// histogram as its sample count.
package scrape

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Values gathers g. A gathering error is returned with what was read.
func Values(g prometheus.Gatherer) (map[string]float64, error) {
	mfs, err := g.Gather()
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			if ls := m.GetLabel(); len(ls) > 0 {
				vs := make([]string, len(ls))
				for i, l := range ls {
					vs[i] = l.GetValue()
				}
				k += "{" + strings.Join(vs, ",") + "}"
			}
			out[k] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out, err
}
