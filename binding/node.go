package binding

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/reason"
)

// Node binding reasons (docs/platform-connector.md lists them).
var (
	ReasonNodeMismatch          = reason.New("node_mismatch", reason.PermissionDenied, "the caller may not report on that node")
	ReasonNodeClaimMismatch     = reason.New("node_claim_mismatch", reason.PermissionDenied, "the token is bound to a pod on another node")
	ReasonUnboundCrossNodeToken = reason.New("unbound_cross_node_token", reason.PermissionDenied, "a cross-node caller's token must be bound to a pod")
	ReasonCrossNodeClaimAbsent  = reason.New("cross_node_claim_absent", reason.PermissionDenied, "a cross-node caller's token names no node")
	ReasonTokenMissing          = reason.New("token_missing", reason.Unauthenticated, "no bearer token: send Authorization: Bearer <token>")
	ReasonUnboundToken          = reason.New("unbound_token", reason.PermissionDenied, "the token is bound to no pod")
	ReasonNodeClaimAbsent       = reason.New("node_claim_absent", reason.PermissionDenied, "the token names no node")
	ReasonMissingNodeName       = reason.New("missing_node_name", reason.PermissionDenied, "an event names no node and there is none to stamp")
)

// NodesAttribute is the request attribute node binding reads: the node
// names of the events in a batch, "" for an event that left it blank.
const NodesAttribute = "nodes"

// NodesRequest is the request of a batch whose events name nodes.
func NodesRequest(nodes []string) Request {
	return Request{Attributes: []Attribute{{Key: NodesAttribute, Values: nodes}}}
}

// Scopes node binding grants, as its metrics and log lines name them.
const (
	ScopeNodeLocal = "node_local"
	ScopeCrossNode = "cross_node"
)

// NodeGrant is what node binding grants a request: its scope and the node
// its blank node names are stamped with. A handler reads it from the
// guard's verdict (v.Grant.(*NodeGrant)) and applies it with Stamp. The
// grants a rule gives most are made once and shared between requests:
// read one, never change it.
type NodeGrant struct {
	// Scope granted: ScopeNodeLocal or ScopeCrossNode; "" for a refused
	// request that was granted none.
	Scope string
	// StampNode is the node a blank node name is stamped with; "" means
	// blank names are not stamped.
	StampNode string
	// NodeClaim is "verified" or "absent" when the rule looked at the
	// token's node claim, else "".
	NodeClaim string

	metrics *NodeMetrics
}

// NodeGrantOf returns the node grant in g, nil when g is not one.
func NodeGrantOf(g Grant) *NodeGrant {
	ng, _ := g.(*NodeGrant)
	return ng
}

// Stamp returns nodes with every blank name replaced by the granted node
// (unchanged when there is none to stamp, or no grant).
func (g *NodeGrant) Stamp(nodes []string) []string {
	if g == nil {
		return nodes
	}
	return StampNodes(nodes, g.StampNode)
}

// Decided counts the grant: the node claim looked at, and the scope of a
// request let through.
func (g *NodeGrant) Decided(allowed bool) {
	m := g.metrics
	if m == nil {
		return
	}
	if g.NodeClaim != "" {
		m.inc(m.claims, m.claimCounters, g.NodeClaim)
	}
	if allowed && g.Scope != "" {
		m.inc(m.decisions, m.scopeCounters, g.Scope)
	}
}

// LogAttrs adds the scope to the decision's log line.
func (g *NodeGrant) LogAttrs() []slog.Attr {
	if g.Scope == "" {
		return nil
	}
	return []slog.Attr{slog.String("scope", g.Scope)}
}

// StampNodes returns nodes with every blank name replaced by node. It
// returns nodes unchanged when node is "".
func StampNodes(nodes []string, node string) []string {
	if node == "" {
		return nodes
	}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		if n == "" {
			n = node
		}
		out[i] = n
	}
	return out
}

// NodeMetrics are node binding's counters:
//
//	<prefix>_auth_decisions_total{decision="node_local"|"cross_node"}  scope granted to a request let through
//	<prefix>_auth_node_claim_total{result="verified"|"absent"}         whether the token carried a node claim
type NodeMetrics struct {
	decisions *prometheus.CounterVec
	claims    *prometheus.CounterVec
	// The children of every label value, resolved once: counting a
	// request hashes no label.
	scopeCounters, claimCounters map[string]prometheus.Counter
}

// inc counts one for label: its resolved child, else through the vector.
func (m *NodeMetrics) inc(vec *prometheus.CounterVec, children map[string]prometheus.Counter, label string) {
	if c, ok := children[label]; ok {
		c.Inc()
		return
	}
	vec.WithLabelValues(label).Inc()
}

// NewNodeMetrics registers node binding's counters on reg, every label
// value at zero.
func NewNodeMetrics(reg prometheus.Registerer, prefix string) (*NodeMetrics, error) {
	if prefix == "" {
		return nil, errors.New("binding: node metrics need a prefix")
	}
	m := &NodeMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_auth_decisions_total",
			Help: "Scope granted to a batch.",
		}, []string{"decision"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_auth_node_claim_total",
			Help: "Whether the token carried a node claim.",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.claims} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("binding: registering node metrics: %w", err)
		}
	}
	m.scopeCounters, m.claimCounters = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
	for _, d := range []string{ScopeNodeLocal, ScopeCrossNode} {
		m.scopeCounters[d] = m.decisions.WithLabelValues(d)
	}
	for _, r := range []string{claimVerified, claimAbsent} {
		m.claimCounters[r] = m.claims.WithLabelValues(r)
	}
	return m, nil
}

const (
	claimVerified = "verified"
	claimAbsent   = "absent"
)

// NodeConfig configures [NodeBinding].
type NodeConfig struct {
	// LocalNode is the node this service runs on (the socket role). Empty
	// for the deployment role, which has no local node: every caller must
	// then present a token bound to a pod on a scheduled node, and may
	// report on the node that token names.
	LocalNode string
	// CrossNode lists the usernames, matched verbatim, that may report on
	// nodes other than their own.
	CrossNode []string
	// Metrics count the grants; nil counts nothing.
	Metrics *NodeMetrics
}

// NodeBinding is the platform-connector's per-caller node rule (docs/guard.md).
//
// Socket role (LocalNode set):
//  1. A token carrying a node claim must name the local node, for every
//     caller, allowlisted or not: node_claim_mismatch.
//  2. Only an allowlisted identity may name other nodes; any other caller
//     is pinned to the local node (node_mismatch for another node; a blank
//     name is stamped with the local node).
//  3. An allowlisted caller must present a token bound to a pod
//     (unbound_cross_node_token) on a scheduled node
//     (cross_node_claim_absent), for own-node events too.
//  4. A caller with no token is accepted and pinned to the local node.
//  5. A verified cross-node caller's blank node name is missing_node_name,
//     rejected in every mode.
//
// A degraded caller (verification failed open) gets a degraded node-local
// scope: blank and own-node events are stamped as a verified node-local
// caller's; an event naming another node is refused as the validator's own
// retryable Unavailable, not as node_mismatch.
//
// Deployment role (no LocalNode): no token is token_missing; a token bound
// to no pod is unbound_token, to a pod never scheduled node_claim_absent;
// the node in the token is the node the caller may report on, and the
// allowlist is the only way to name others.
func NodeBinding(cfg NodeConfig) Rule {
	n := &nodeRule{local: cfg.LocalNode, cross: slices.Clone(cfg.CrossNode), metrics: cfg.Metrics}
	n.crossGrant = n.grant(ScopeCrossNode, "", claimVerified)
	for i, claim := range []string{"", claimVerified, claimAbsent} {
		n.localGrants[i] = n.grant(ScopeNodeLocal, cfg.LocalNode, claim)
	}
	return NewRule([]reason.Reason{ReasonNodeMismatch, ReasonNodeClaimMismatch, ReasonUnboundCrossNodeToken, ReasonCrossNodeClaimAbsent,
		ReasonTokenMissing, ReasonUnboundToken, ReasonNodeClaimAbsent, ReasonMissingNodeName},
		func(s Subject, r Request) (Grant, *Violation) {
			nodes, _ := r.Attribute(NodesAttribute)
			if n.local == "" {
				return n.deployment(s, nodes)
			}
			return n.socket(s, nodes)
		})
}

// nodeRule is node binding with the grants it gives most made once: the
// local node's (socket role), by node claim, and the cross-node grant.
type nodeRule struct {
	local       string
	cross       []string
	metrics     *NodeMetrics
	localGrants [3]*NodeGrant // node claim "", verified, absent
	crossGrant  *NodeGrant
}

func (n *nodeRule) grant(scope, stamp, claim string) *NodeGrant {
	return &NodeGrant{Scope: scope, StampNode: stamp, NodeClaim: claim, metrics: n.metrics}
}

// localGrant pins a caller to the local node.
func (n *nodeRule) localGrant(claim string) *NodeGrant {
	switch claim {
	case claimVerified:
		return n.localGrants[1]
	case claimAbsent:
		return n.localGrants[2]
	}
	return n.localGrants[0]
}

func (n *nodeRule) socket(s Subject, nodes []string) (Grant, *Violation) {
	// Whatever happens, a caller let through is stamped as node-local
	// unless it earns cross-node scope below.
	local := n.local
	c := s.Caller
	switch {
	case s.Degraded:
		if other := otherNode(nodes, local); other != "" {
			return n.localGrant(""), &Violation{Reason: s.DegradedReason, Counted: true,
				Detail: fmt.Sprintf("validator gave no verdict; a degraded node-local caller named node %q", other)}
		}
		return n.localGrant(""), nil
	case c == nil:
		// No token on the node-local socket: pinned to this node.
		if other := otherNode(nodes, local); other != "" {
			return n.localGrant(""), &Violation{Reason: ReasonNodeMismatch,
				Detail: fmt.Sprintf("a caller with no token is pinned to node %q and named node %q", local, other)}
		}
		return n.localGrant(""), nil
	}
	g := n.localGrant(nodeClaim(c.NodeName))
	if c.NodeName != "" && c.NodeName != local {
		return g, &Violation{Reason: ReasonNodeClaimMismatch,
			Detail: fmt.Sprintf("%s presented a token issued on node %q to the connector on node %q", c.Username, c.NodeName, local)}
	}
	if !slices.Contains(n.cross, c.Username) {
		if other := otherNode(nodes, local); other != "" {
			return g, &Violation{Reason: ReasonNodeMismatch,
				Detail: fmt.Sprintf("%s is not on the cross-node list; pinned to node %q, it named node %q", c.Username, local, other)}
		}
		return g, nil
	}
	switch {
	case c.PodName == "":
		return g, &Violation{Reason: ReasonUnboundCrossNodeToken,
			Detail: fmt.Sprintf("%s is on the cross-node list but its token is bound to no pod", c.Username)}
	case c.NodeName == "":
		return g, &Violation{Reason: ReasonCrossNodeClaimAbsent,
			Detail: fmt.Sprintf("%s is on the cross-node list but its pod %q was never scheduled", c.Username, c.PodName)}
	}
	return n.grantCrossNode(c, nodes)
}

// grantCrossNode gives a verified, allowlisted, pod-bound caller cross-node
// scope: its events may name any node, and so must name one.
func (n *nodeRule) grantCrossNode(c *authn.Caller, nodes []string) (Grant, *Violation) {
	if slices.Contains(nodes, "") {
		return n.crossGrant, &Violation{Reason: ReasonMissingNodeName, Always: true,
			Detail: fmt.Sprintf("%s has cross-node scope and sent an event with no node name", c.Username)}
	}
	return n.crossGrant, nil
}

func (n *nodeRule) deployment(s Subject, nodes []string) (Grant, *Violation) {
	c := s.Caller
	switch {
	case s.Degraded:
		// No local node to fall back on.
		return nil, degraded(s)
	case c == nil:
		return nil, &Violation{Reason: ReasonTokenMissing, Detail: "the deployment connector requires a token"}
	}
	switch {
	case c.PodName == "":
		return n.grant("", "", nodeClaim(c.NodeName)), &Violation{Reason: ReasonUnboundToken,
			Detail: fmt.Sprintf("%s presented a token bound to no pod", c.Username)}
	case c.NodeName == "":
		return n.grant("", "", claimAbsent), &Violation{Reason: ReasonNodeClaimAbsent,
			Detail: fmt.Sprintf("%s presented a token bound to pod %q, which was never scheduled", c.Username, c.PodName)}
	}
	if slices.Contains(n.cross, c.Username) {
		return n.grantCrossNode(c, nodes)
	}
	g := n.grant(ScopeNodeLocal, c.NodeName, claimVerified)
	if other := otherNode(nodes, c.NodeName); other != "" {
		return g, &Violation{Reason: ReasonNodeMismatch,
			Detail: fmt.Sprintf("%s may report on node %q (its token's) and named node %q", c.Username, c.NodeName, other)}
	}
	return g, nil
}

// otherNode returns the first non-blank node name that is not node.
func otherNode(nodes []string, node string) string {
	for _, n := range nodes {
		if n != "" && n != node {
			return n
		}
	}
	return ""
}

func nodeClaim(node string) string {
	if node == "" {
		return claimAbsent
	}
	return claimVerified
}
