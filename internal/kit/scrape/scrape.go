// Package scrape reads a Prometheus registry the way the tests and the
// demo compare metrics: every counter and gauge as "name{v1,v2}" (its label
// values in the order of their names; "name" without labels) → value, and a
// histogram as its sample count — and reads a running service's /metrics
// endpoint ([Families]).
package scrape

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// maxExposition bounds what Families reads of one /metrics answer.
const maxExposition = 16 << 20

// client is Families' HTTP client: a scrape waits at most this long.
var client = &http.Client{Timeout: 10 * time.Second}

// Families scrapes http://addr/metrics (Prometheus text format) into its
// metric families by name.
func Families(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxExposition))
}

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
