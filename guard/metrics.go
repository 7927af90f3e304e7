package guard

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
)

// NodeBindingReasons are the reasons of seed 003's metrics table: what a
// node-binding service can report.
var NodeBindingReasons = []string{
	binding.ReasonNodeMismatch, binding.ReasonNodeClaimMismatch, binding.ReasonUnboundCrossNodeToken,
	binding.ReasonCrossNodeClaimAbsent, binding.ReasonTokenMissing, binding.ReasonUnboundToken,
	binding.ReasonNodeClaimAbsent, binding.ReasonMissingNodeName,
	string(authn.TokenInvalid), bearer.ReasonMalformed,
	string(authn.ValidatorUnavailable), string(authn.ValidatorTimeout), string(authn.ValidatorError),
}

// Reasons is every reason the pipeline can report, for pre-initialising
// the violations counter so that a healthy service reports zeros.
var Reasons = append(append([]string{}, NodeBindingReasons...),
	binding.ReasonPrincipalCannotRepresentSystem, binding.ReasonRoleMissing, binding.ReasonTenantMissing)

// Metrics are the guard's Prometheus counters:
//
//	<prefix>_auth_decisions_total{decision="node_local"|"cross_node"}  scope granted to a request
//	<prefix>_auth_violations_total{reason}                              requests that violated a rule, in every mode
//	<prefix>_auth_node_claim_total{result="verified"|"absent"}         whether the token carried a node claim
//
// A nil *Metrics counts nothing.
type Metrics struct {
	decisions  *prometheus.CounterVec
	violations *prometheus.CounterVec
	nodeClaims *prometheus.CounterVec
}

// NewMetrics registers the counters on reg under prefix (e.g.
// "platform_connector") and initialises every label value to zero. reasons
// lists the violation reasons to initialise; nil means [Reasons].
func NewMetrics(reg prometheus.Registerer, prefix string, reasons []string) (*Metrics, error) {
	if reasons == nil {
		reasons = Reasons
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_auth_decisions_total",
			Help: "Scope granted to a batch.",
		}, []string{"decision"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_auth_violations_total",
			Help: "Batches that violated the caller-binding rules. Under enforce these are rejected; under audit they are recorded but let through.",
		}, []string{"reason"}),
		nodeClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_auth_node_claim_total",
			Help: "Whether the token carried a node claim.",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.violations, m.nodeClaims} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("guard: registering metrics: %w", err)
		}
	}
	for _, d := range []string{binding.ScopeNodeLocal, binding.ScopeCrossNode} {
		m.decisions.WithLabelValues(d)
	}
	for _, r := range reasons {
		m.violations.WithLabelValues(r)
	}
	for _, r := range []string{"verified", "absent"} {
		m.nodeClaims.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) decision(scope string) {
	if m != nil {
		m.decisions.WithLabelValues(scope).Inc()
	}
}

func (m *Metrics) violation(reason string) {
	if m != nil {
		m.violations.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) nodeClaim(result string) {
	if m != nil {
		m.nodeClaims.WithLabelValues(result).Inc()
	}
}
