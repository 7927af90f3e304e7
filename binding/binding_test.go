package binding_test

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/reason"
)

func TestStamp(t *testing.T) {
	nodes := []string{"", "node-b", ""}
	if got := binding.StampNodes(nodes, "node-a"); fmt.Sprint(got) != "[node-a node-b node-a]" {
		t.Fatalf("Stamp = %q", got)
	}
	if fmt.Sprint(nodes) != "[ node-b ]" {
		t.Fatal("Stamp changed its input")
	}
	if got := binding.StampNodes(nodes, ""); fmt.Sprint(got) != fmt.Sprint(nodes) {
		t.Fatalf("Stamp without a node = %q", got)
	}
	if got := binding.NodeGrantOf(nil).Stamp(nodes); fmt.Sprint(got) != fmt.Sprint(nodes) {
		t.Fatalf("Stamp with no grant = %q", got)
	}
}

// TestNodeBindingReadsItsAttribute: node binding reads the node names
// from the request's attribute and grants the scope its handler stamps
// with; a request without the attribute names no node.
func TestNodeBindingReadsItsAttribute(t *testing.T) {
	rule := binding.NodeBinding(binding.NodeConfig{LocalNode: "node-a"})
	caller := &authn.Caller{Username: "system:serviceaccount:ns:agent", PodName: "p", NodeName: "node-a"}
	g, v := rule.Check(binding.Subject{Caller: caller}, binding.NodesRequest([]string{"", "node-a"}))
	ng := binding.NodeGrantOf(g)
	if v != nil || ng == nil || ng.Scope != binding.ScopeNodeLocal || ng.NodeClaim != "verified" || fmt.Sprint(ng.Stamp([]string{""})) != "[node-a]" {
		t.Fatalf("grant %+v, violation %+v", ng, v)
	}
	if _, v := rule.Check(binding.Subject{Caller: caller}, binding.NodesRequest([]string{"node-b"})); v == nil || v.Reason != binding.ReasonNodeMismatch {
		t.Fatalf("another node: %+v", v)
	}
	if _, v := rule.Check(binding.Subject{Caller: caller}, binding.Request{Method: "/x.Y/Z"}); v != nil {
		t.Fatalf("no attribute: %+v", v)
	}
}

type testGrant string

func (testGrant) Decided(bool)          {}
func (testGrant) LogAttrs() []slog.Attr { return nil }

func TestAllStopsAtTheFirstViolation(t *testing.T) {
	var ran []string
	shared := reason.New("shared", reason.PermissionDenied, "shared")
	c := reason.New("c", reason.PermissionDenied, "c")
	rule := func(name string, g binding.Grant, v *binding.Violation) binding.Rule {
		return binding.NewRule([]reason.Reason{reason.New(name+"_reason", reason.PermissionDenied, name), shared}, func(binding.Subject, binding.Request) (binding.Grant, *binding.Violation) {
			ran = append(ran, name)
			return g, v
		})
	}
	all := binding.All(rule("a", nil, nil), rule("b", testGrant("b"), nil), rule("c", testGrant("c"), &binding.Violation{Reason: c}), rule("d", nil, nil))
	g, v := all.Check(binding.Subject{}, binding.Request{})
	if v == nil || v.Reason != c || g != testGrant("b") || fmt.Sprint(ran) != "[a b c]" {
		t.Fatalf("grant %v, violation %v, ran %v", g, v, ran)
	}
	if got := fmt.Sprint(all.Reasons()); got != "[a_reason shared b_reason c_reason d_reason]" {
		t.Fatalf("the combined reasons %s", got)
	}
}

func TestSystemBindingIsExact(t *testing.T) {
	rule := binding.SystemBinding(map[string]string{"secrets-engine": "system:serviceaccount:secrets-engine:secrets-engine"})
	for _, tt := range []struct {
		user, system string
		ok           bool
	}{
		{"system:serviceaccount:secrets-engine:secrets-engine", "secrets-engine", true},
		{"system:serviceaccount:secrets-engine:secrets-engine ", "secrets-engine", false},
		{"System:serviceaccount:secrets-engine:secrets-engine", "secrets-engine", false},
		{"system:serviceaccount:secrets-engine:secrets-engine", "Secrets-Engine", false},
		{"system:serviceaccount:secrets-engine:default", "secrets-engine", false},
	} {
		_, v := rule.Check(binding.Subject{Caller: &authn.Caller{Username: tt.user}}, binding.Request{System: tt.system})
		if (v == nil) != tt.ok || v != nil && (v.Reason != binding.ReasonPrincipalCannotRepresentSystem || v.Reason.Code() != reason.PermissionDenied) {
			t.Errorf("%q for %q: %+v", tt.user, tt.system, v)
		}
	}
	if _, v := rule.Check(binding.Subject{Degraded: true, DegradedReason: authn.ValidatorTimeout}, binding.Request{System: "secrets-engine"}); v == nil || v.Reason.Code() != reason.Unavailable || !v.Counted {
		t.Errorf("degraded: %+v", v)
	}
}

func TestRolesByFullOrShortMethod(t *testing.T) {
	rule := binding.Roles(binding.RoleConfig{Required: map[string]string{"GetJob": "r", "/pkg.S/Put": "w"}})
	c := &authn.Caller{Username: "u", Roles: []string{"r"}}
	if _, v := rule.Check(binding.Subject{Caller: c}, binding.Request{Method: "/vmafx.v1.Controller/GetJob"}); v != nil {
		t.Errorf("short name: %+v", v)
	}
	if _, v := rule.Check(binding.Subject{Caller: c}, binding.Request{Method: "/pkg.S/Put"}); v == nil || v.Reason != binding.ReasonRoleMissing {
		t.Errorf("full name needing another role: %+v", v)
	}
}

// TestRulesDeclareTheirReasons: each rule says every reason it gives, and
// Reasons adds the authentication failures, each with a code and a
// sentence, so a service's violations counter starts at zero for exactly
// what it can report.
func TestRulesDeclareTheirReasons(t *testing.T) {
	for name, c := range map[string]struct {
		rule binding.Rule
		want []reason.Reason
	}{
		"node":   {binding.NodeBinding(binding.NodeConfig{LocalNode: "n"}), []reason.Reason{binding.ReasonNodeMismatch, binding.ReasonMissingNodeName, binding.ReasonUnboundToken}},
		"system": {binding.SystemBinding(nil), []reason.Reason{binding.ReasonPrincipalCannotRepresentSystem}},
		"roles":  {binding.Roles(binding.RoleConfig{}), []reason.Reason{binding.ReasonRoleMissing, binding.ReasonTenantMissing}},
	} {
		got := binding.Reasons(c.rule)
		for _, r := range append(c.want, binding.AuthenticationReasons()...) {
			if !slices.Contains(got, r) {
				t.Errorf("%s: %s not among %v", name, r, got)
			}
		}
		for _, r := range got {
			if r.Code() == 0 || r.Sentence() == "" {
				t.Errorf("%s: reason %s has no code or sentence", name, r)
			}
		}
	}
	if authn.TokenInvalid.Code() != reason.Unauthenticated || authn.ValidatorTimeout.Code() != reason.Unavailable {
		t.Fatal("authentication reasons' codes")
	}
}

// TestRoleGrants: a grant names callers by username, group, service
// account (one, or a namespace's every account) or an extra value, beside
// the roles the issuer states; it gives only its own role.
func TestRoleGrants(t *testing.T) {
	rule := binding.Roles(binding.RoleConfig{Required: map[string]string{"Get": "reader", "Put": "writer"}, Grants: []binding.RoleGrant{
		{Role: "reader", Usernames: []string{"alice"}},
		{Role: "reader", ServiceAccounts: []string{"ci:*"}},
		{Role: "writer", Extra: map[string][]string{"example.com/team": {"storage"}}},
	}})
	if err := binding.Validate(rule); err != nil {
		t.Fatal(err)
	}
	if n := binding.Needs(rule); len(n) != 0 {
		t.Fatalf("with grants the rule needs %v of the backend", n)
	}
	for _, c := range []struct {
		caller authn.Caller
		method string
		ok     bool
	}{
		{authn.Caller{Username: "alice"}, "Get", true},
		{authn.Caller{Username: "alice"}, "Put", false},
		{authn.Caller{Username: "system:serviceaccount:ci:runner"}, "Get", true},
		{authn.Caller{Username: "system:serviceaccount:cid:runner"}, "Get", false},
		{authn.Caller{Username: "bob", Extra: map[string][]string{"example.com/team": {"web", "storage"}}}, "Put", true},
		{authn.Caller{Username: "bob", Extra: map[string][]string{"example.com/team": {"web"}}}, "Put", false},
		{authn.Caller{Username: "carol", Roles: []string{"writer"}}, "Put", true},
	} {
		_, v := rule.Check(binding.Subject{Caller: &c.caller}, binding.Request{Method: c.method})
		if (v == nil) != c.ok {
			t.Errorf("%+v %s: violation %v; want allowed %v", c.caller, c.method, v, c.ok)
		}
	}
	if n := binding.Needs(binding.Roles(binding.RoleConfig{RequireTenant: true})); len(n) != 2 {
		t.Errorf("roles without grants, with a tenant: needs %v", n)
	}
}
