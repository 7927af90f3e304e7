// Package binding decides what a caller may say: which system it may speak
// for, which nodes it may report about, and which methods it may call.
//
// A [Rule] judges one [Request] from one [Subject] — a verified caller, a
// caller that presented no token, or a caller whose verification failed
// open — and returns a [*Violation] with a stable reason, or nothing; and,
// for a rule that grants more than "allowed", a [Grant] the handler reads
// (node binding's [NodeGrant]: a scope and the node blank names are
// stamped with). The core knows no rule's vocabulary: a request carries a
// system, a method and the attributes a service's rules read, and a grant
// is opaque until the handler that asked for it looks inside. A request is
// judged whole before anything in it is changed.
package binding

import (
	"errors"
	"log/slog"
	"slices"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/reason"
)

// Violation is a broken rule.
type Violation struct {
	// Reason is the stable reason: its word is the metric label, the log
	// field and the detail the caller sees; its code says how the refusal
	// travels.
	Reason reason.Reason
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
	DegradedReason reason.Reason
}

// Request is what the caller asks to say.
type Request struct {
	// System is the system the caller speaks for (the pdp's check request
	// "system").
	System string
	// Method is the RPC or operation ("/vmafx.v1.Controller/GetJob" or
	// "GET /v1/jobs").
	Method string
	// Attributes are what else the request says that a service's rules
	// read, by key (node binding reads [NodesAttribute]).
	Attributes []Attribute
}

// Attribute is one named list of values a request carries.
type Attribute struct {
	Key    string
	Values []string
}

// Attribute returns the values of the attribute key and whether the
// request carries it.
func (r Request) Attribute(key string) ([]string, bool) {
	for _, a := range r.Attributes {
		if a.Key == key {
			return a.Values, true
		}
	}
	return nil, false
}

// Grant is what a rule grants beyond "allowed". The guard hands it to the
// handler untouched (in its verdict) and, once it has decided, calls
// Decided exactly once, so that the rule that made it can count what it
// granted. A nil Grant grants nothing more.
type Grant interface {
	// Decided reports whether the request the grant was made for was let
	// through (enforce: no violation; audit: also an audited one).
	Decided(allowed bool)
	// LogAttrs are the fields the grant adds to the decision's log line.
	LogAttrs() []slog.Attr
}

// Rule judges one request, and says every reason it can refuse with. The
// rules are [SystemBinding], [NodeBinding] and [Roles]; [All] combines them;
// [NewRule] and [Deny] make one of your own. A guard (package guard) asks
// its rule after verifying the caller:
//
//	rule := binding.All(
//		binding.SystemBinding(map[string]string{"secrets-engine": "system:serviceaccount:secrets-engine:secrets-engine"}),
//		binding.Roles(binding.RoleConfig{
//			Required: map[string]string{"Check": "reader"},
//			Grants:   []binding.RoleGrant{{Role: "reader", Groups: []string{"system:serviceaccounts:demo"}}},
//		}))
type Rule interface {
	// Check returns nil when the subject may make the request, and what it
	// grants. A refusal may come with a grant too: the scope the request
	// gets if audit lets it through.
	Check(s Subject, r Request) (Grant, *Violation)
	// Reasons are the reasons Check can give (see [Reasons]).
	Reasons() []reason.Reason
}

// CheckFunc is the check of a rule made with [NewRule].
type CheckFunc func(s Subject, r Request) (Grant, *Violation)

// NewRule makes a rule of a check and the reasons it can give.
func NewRule(reasons []reason.Reason, check CheckFunc) Rule {
	return ruleFunc{reasons: slices.Clone(reasons), check: check}
}

// Deny makes a rule that grants nothing of a check that only refuses.
func Deny(reasons []reason.Reason, check func(s Subject, r Request) *Violation) Rule {
	return NewRule(reasons, func(s Subject, r Request) (Grant, *Violation) { return nil, check(s, r) })
}

type ruleFunc struct {
	reasons []reason.Reason
	check   CheckFunc
}

func (f ruleFunc) Check(s Subject, r Request) (Grant, *Violation) { return f.check(s, r) }
func (f ruleFunc) Reasons() []reason.Reason                       { return slices.Clone(f.reasons) }

// Need is a fact about the caller a rule reads that only some backends
// state, and why the rule needs it.
type Need struct {
	Fact authn.Fact
	Why  string
}

// Needing is a rule that reads facts only some backends state; the guard
// refuses to be built over a backend that never states one.
type Needing interface {
	Needs() []Need
}

// Needs are the facts rule reads that only some backends state.
func Needs(rule Rule) []Need {
	if n, ok := rule.(Needing); ok {
		return n.Needs()
	}
	return nil
}

// Validate says whether rule's configuration can be honoured (a RoleGrant
// naming nobody cannot); the guard refuses to be built over one that
// cannot.
func Validate(rule Rule) error {
	if v, ok := rule.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

type needing struct {
	Rule
	needs []Need
	err   error
}

func (n needing) Needs() []Need   { return slices.Clone(n.needs) }
func (n needing) Validate() error { return n.err }

// All combines rules: the first violation wins, in order; the grant is the
// first rule's that gives one; the reasons and the needs are all of
// theirs.
func All(rules ...Rule) Rule {
	var reasons []reason.Reason
	var needs []Need
	var errs []error
	for _, rule := range rules {
		reasons = reason.Union(reasons, rule.Reasons()...)
		needs = append(needs, Needs(rule)...)
		errs = append(errs, Validate(rule))
	}
	return needing{NewRule(reasons, func(s Subject, r Request) (Grant, *Violation) {
		var grant Grant
		for _, rule := range rules {
			g, v := rule.Check(s, r)
			if grant == nil {
				grant = g
			}
			if v != nil {
				return grant, v
			}
		}
		return grant, nil
	}), needs, errors.Join(errs...)}
}

// degraded is the refusal of a degraded subject by a rule that needs a
// verified identity: the validator's own reason, retryable.
func degraded(s Subject) *Violation {
	return &Violation{Reason: s.DegradedReason, Counted: true,
		Detail: "the validator gave no verdict, and this rule needs a verified identity"}
}
