// Package binding decides what a caller may say: which system it may speak
// for, which nodes it may report about, and which methods it may call.
//
// A [Rule] judges one request from one [Subject] — a verified caller, a
// caller that presented no token, or a caller whose verification failed
// open — and returns nothing or a [*Violation] with a stable reason. Rules
// that grant a scope (node binding) record it in the [Decision], which the
// handler then applies with [Stamp]. A request is judged whole before
// anything in it is changed.
package binding

import (
	"slices"

	"github.com/callerauth/callerauth/authn"
)

// Code is the class of refusal, mapped by the guard to a gRPC code and an
// HTTP status.
type Code int

// Refusal codes.
const (
	// Unauthenticated: no usable credential (gRPC Unauthenticated, HTTP 401).
	Unauthenticated Code = iota + 1
	// PermissionDenied: a valid identity that may not say this (gRPC
	// PermissionDenied, HTTP 403).
	PermissionDenied
	// Unavailable: the answer depends on a validator that did not give one;
	// retry later (gRPC Unavailable, HTTP 503).
	Unavailable
)

func (c Code) String() string {
	switch c {
	case Unauthenticated:
		return "Unauthenticated"
	case PermissionDenied:
		return "PermissionDenied"
	case Unavailable:
		return "Unavailable"
	default:
		return "OK"
	}
}

// Violation is a broken rule.
type Violation struct {
	// Reason is the stable reason string: metric label, log field and the
	// detail the caller sees.
	Reason string
	// Code says how the refusal travels.
	Code Code
	// Detail explains it, for the log only; never sent to the caller.
	Detail string
	// Always is set for a violation rejected in every mode, even audit
	// (missing_node_name: nothing downstream can handle it).
	Always bool
	// Counted is set when the violation's reason was already counted for
	// this request (a degraded caller's refusal repeats the validator's
	// reason).
	Counted bool
	// Metadata are facts the caller may see beside the reason, such as
	// the role a method requires ("required_role"); they travel in the
	// gRPC ErrorInfo. Never the token, never the detail.
	Metadata map[string]string
}

// Subject is who a rule judges.
type Subject struct {
	// Caller is the verified identity; nil when the caller presented no
	// token (where that is allowed) or its verification failed open.
	Caller *authn.Caller
	// Degraded is set when verification failed open: the validator was
	// unavailable or timed out and failOpenOnUnavailable granted a
	// degraded scope. DegradedReason is that validator reason.
	Degraded       bool
	DegradedReason authn.Reason
}

// Request is what the caller asks to say.
type Request struct {
	// System is the system the caller speaks for (the pdp's check request
	// "system").
	System string
	// Method is the RPC or operation ("/vmafx.v1.Controller/GetJob" or
	// "GetJob").
	Method string
	// Nodes are the node names of the events in a batch, "" for an event
	// that left it blank.
	Nodes []string
}

// Scope names for metrics.
const (
	ScopeNodeLocal = "node_local"
	ScopeCrossNode = "cross_node"
)

// Decision is what rules grant beyond "allowed": the scope and the node
// blank node names are stamped with. Rules fill it in.
type Decision struct {
	// Scope granted: ScopeNodeLocal, ScopeCrossNode, or "" when no rule
	// speaks of scope.
	Scope string
	// StampNode is the node a blank node name is stamped with; "" means
	// blank names are not stamped.
	StampNode string
	// NodeClaim is "verified" or "absent" when a rule looked at the
	// token's node claim.
	NodeClaim string
}

// Rule judges one request, and says every reason it can refuse with.
type Rule interface {
	// Check returns nil when the subject may make the request.
	Check(s Subject, r Request, d *Decision) *Violation
	// Reasons are the reasons Check can give (see [Reasons]).
	Reasons() []string
}

// NewRule makes a rule of a check and the reasons it can give.
func NewRule(reasons []string, check func(s Subject, r Request, d *Decision) *Violation) Rule {
	return ruleFunc{reasons: slices.Clone(reasons), check: check}
}

type ruleFunc struct {
	reasons []string
	check   func(Subject, Request, *Decision) *Violation
}

func (f ruleFunc) Check(s Subject, r Request, d *Decision) *Violation { return f.check(s, r, d) }
func (f ruleFunc) Reasons() []string                                  { return slices.Clone(f.reasons) }

// All combines rules: the first violation wins, in order; the reasons are
// all of theirs.
func All(rules ...Rule) Rule {
	var reasons []string
	for _, rule := range rules {
		for _, r := range rule.Reasons() {
			if !slices.Contains(reasons, r) {
				reasons = append(reasons, r)
			}
		}
	}
	return NewRule(reasons, func(s Subject, r Request, d *Decision) *Violation {
		for _, rule := range rules {
			if v := rule.Check(s, r, d); v != nil {
				return v
			}
		}
		return nil
	})
}

// Stamp returns nodes with every blank name replaced by d.StampNode. It
// returns nodes unchanged when there is nothing to stamp.
func Stamp(nodes []string, d Decision) []string {
	if d.StampNode == "" {
		return nodes
	}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		if n == "" {
			n = d.StampNode
		}
		out[i] = n
	}
	return out
}

// degraded is the refusal of a degraded subject by a rule that needs a
// verified identity: the validator's own reason, retryable.
func degraded(s Subject) *Violation {
	return &Violation{Reason: string(s.DegradedReason), Code: Unavailable, Counted: true,
		Detail: "the validator gave no verdict, and this rule needs a verified identity"}
}
