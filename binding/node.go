package binding

import (
	"fmt"
	"slices"

	"github.com/callerauth/callerauth/authn"
)

// Node binding reasons (docs/platform-connector.md lists them).
const (
	ReasonNodeMismatch          = "node_mismatch"
	ReasonNodeClaimMismatch     = "node_claim_mismatch"
	ReasonUnboundCrossNodeToken = "unbound_cross_node_token"
	ReasonCrossNodeClaimAbsent  = "cross_node_claim_absent"
	ReasonTokenMissing          = "token_missing"
	ReasonUnboundToken          = "unbound_token"
	ReasonNodeClaimAbsent       = "node_claim_absent"
	ReasonMissingNodeName       = "missing_node_name"
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
	cross := slices.Clone(cfg.CrossNode)
	return NewRule([]string{ReasonNodeMismatch, ReasonNodeClaimMismatch, ReasonUnboundCrossNodeToken, ReasonCrossNodeClaimAbsent,
		ReasonTokenMissing, ReasonUnboundToken, ReasonNodeClaimAbsent, ReasonMissingNodeName},
		func(s Subject, r Request, d *Decision) *Violation {
			if cfg.LocalNode == "" {
				return deploymentNode(cross, s, r, d)
			}
			return socketNode(cfg.LocalNode, cross, s, r, d)
		})
}

func socketNode(local string, cross []string, s Subject, r Request, d *Decision) *Violation {
	// Whatever happens, a caller let through is stamped as node-local
	// unless it earns cross-node scope below.
	d.Scope, d.StampNode = ScopeNodeLocal, local
	c := s.Caller
	switch {
	case s.Degraded:
		if other := otherNode(r.Nodes, local); other != "" {
			return &Violation{Reason: string(s.DegradedReason), Code: Unavailable, Counted: true,
				Detail: fmt.Sprintf("validator gave no verdict; a degraded node-local caller named node %q", other)}
		}
		return nil
	case c == nil:
		// No token on the node-local socket: pinned to this node.
		if other := otherNode(r.Nodes, local); other != "" {
			return &Violation{Reason: ReasonNodeMismatch, Code: PermissionDenied,
				Detail: fmt.Sprintf("a caller with no token is pinned to node %q and named node %q", local, other)}
		}
		return nil
	}
	d.NodeClaim = nodeClaim(c.NodeName)
	if c.NodeName != "" && c.NodeName != local {
		return &Violation{Reason: ReasonNodeClaimMismatch, Code: PermissionDenied,
			Detail: fmt.Sprintf("%s presented a token issued on node %q to the connector on node %q", c.Username, c.NodeName, local)}
	}
	if !slices.Contains(cross, c.Username) {
		if other := otherNode(r.Nodes, local); other != "" {
			return &Violation{Reason: ReasonNodeMismatch, Code: PermissionDenied,
				Detail: fmt.Sprintf("%s is not on the cross-node list; pinned to node %q, it named node %q", c.Username, local, other)}
		}
		return nil
	}
	switch {
	case c.PodName == "":
		return &Violation{Reason: ReasonUnboundCrossNodeToken, Code: PermissionDenied,
			Detail: fmt.Sprintf("%s is on the cross-node list but its token is bound to no pod", c.Username)}
	case c.NodeName == "":
		return &Violation{Reason: ReasonCrossNodeClaimAbsent, Code: PermissionDenied,
			Detail: fmt.Sprintf("%s is on the cross-node list but its pod %q was never scheduled", c.Username, c.PodName)}
	}
	return grantCrossNode(c, r, d)
}

// grantCrossNode gives a verified, allowlisted, pod-bound caller cross-node
// scope: its events may name any node, and so must name one.
func grantCrossNode(c *authn.Caller, r Request, d *Decision) *Violation {
	d.Scope, d.StampNode = ScopeCrossNode, ""
	if slices.Contains(r.Nodes, "") {
		return &Violation{Reason: ReasonMissingNodeName, Code: PermissionDenied, Always: true,
			Detail: fmt.Sprintf("%s has cross-node scope and sent an event with no node name", c.Username)}
	}
	return nil
}

func deploymentNode(cross []string, s Subject, r Request, d *Decision) *Violation {
	c := s.Caller
	switch {
	case s.Degraded:
		// No local node to fall back on.
		return degraded(s)
	case c == nil:
		return &Violation{Reason: ReasonTokenMissing, Code: Unauthenticated, Detail: "the deployment connector requires a token"}
	}
	d.NodeClaim = nodeClaim(c.NodeName)
	switch {
	case c.PodName == "":
		return &Violation{Reason: ReasonUnboundToken, Code: PermissionDenied,
			Detail: fmt.Sprintf("%s presented a token bound to no pod", c.Username)}
	case c.NodeName == "":
		return &Violation{Reason: ReasonNodeClaimAbsent, Code: PermissionDenied,
			Detail: fmt.Sprintf("%s presented a token bound to pod %q, which was never scheduled", c.Username, c.PodName)}
	}
	if slices.Contains(cross, c.Username) {
		return grantCrossNode(c, r, d)
	}
	d.Scope, d.StampNode = ScopeNodeLocal, c.NodeName
	if other := otherNode(r.Nodes, c.NodeName); other != "" {
		return &Violation{Reason: ReasonNodeMismatch, Code: PermissionDenied,
			Detail: fmt.Sprintf("%s may report on node %q (its token's) and named node %q", c.Username, c.NodeName, other)}
	}
	return nil
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
		return "absent"
	}
	return "verified"
}
