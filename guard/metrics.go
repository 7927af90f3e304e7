package guard

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/reason"
)

// Metrics are the guard's Prometheus counters:
//
//	<prefix>_auth_violations_total{reason}                              requests that violated a rule, in every mode
//	<prefix>_auth_mode{mode="enforce"|"audit"}                          1 for the mode the guard runs in, 0 for the other
//
// A rule's own series (node binding's scope and node-claim counters,
// binding.NewNodeMetrics) are the rule's, counted through its grant. A nil *Metrics counts nothing.
type Metrics struct {
	violations *prometheus.CounterVec
}

// MetricsConfig configures [NewMetrics].
type MetricsConfig struct {
	// Prefix of the metric names, e.g. "platform_connector". Required.
	Prefix string
	// Reasons are the violation reasons to initialise to zero, so that a
	// healthy service reports zeros: binding.Reasons of the service's rule.
	// Nil: the authentication reasons only.
	Reasons []reason.Reason
	// Mode is the mode the guard runs in, exported as <prefix>_auth_mode
	// so that an alert can tell audited violations (let through) from
	// refused ones. Empty: the gauge is not exported.
	Mode Mode
}

// NewMetrics registers the counters on reg and initialises every label
// value to zero.
func NewMetrics(reg prometheus.Registerer, cfg MetricsConfig) (*Metrics, error) {
	if cfg.Prefix == "" {
		return nil, errors.New("guard: metrics need a prefix")
	}
	reasons := cfg.Reasons
	if reasons == nil {
		reasons = binding.AuthenticationReasons()
	}
	prefix := cfg.Prefix
	m := &Metrics{
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_auth_violations_total",
			Help: "Requests that violated the caller-authentication rules, by reason. Under enforce these are rejected; under audit they are recorded but let through.",
		}, []string{"reason"}),
	}
	collectors := []prometheus.Collector{m.violations}
	if cfg.Mode != "" {
		mode := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: prefix + "_auth_mode",
			Help: "1 for the mode caller authentication runs in (enforce: violations refused; audit: counted and let through), 0 for the other.",
		}, []string{"mode"})
		for _, md := range []Mode{Enforce, Audit} {
			v := 0.0
			if md == cfg.Mode {
				v = 1
			}
			mode.WithLabelValues(string(md)).Set(v)
		}
		collectors = append(collectors, mode)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("guard: registering metrics: %w", err)
		}
	}
	for _, r := range reasons {
		m.violations.WithLabelValues(r.String())
	}
	return m, nil
}

func (m *Metrics) violation(r reason.Reason) {
	if m != nil {
		m.violations.WithLabelValues(r.String()).Inc()
	}
}
