package binding_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
)

func TestStamp(t *testing.T) {
	nodes := []string{"", "node-b", ""}
	if got := binding.Stamp(nodes, binding.Decision{StampNode: "node-a"}); fmt.Sprint(got) != "[node-a node-b node-a]" {
		t.Fatalf("Stamp = %q", got)
	}
	if fmt.Sprint(nodes) != "[ node-b ]" {
		t.Fatal("Stamp changed its input")
	}
	if got := binding.Stamp(nodes, binding.Decision{}); fmt.Sprint(got) != fmt.Sprint(nodes) {
		t.Fatalf("Stamp without a node = %q", got)
	}
}

func TestAllStopsAtTheFirstViolation(t *testing.T) {
	var ran []string
	rule := func(name string, v *binding.Violation) binding.Rule {
		return binding.NewRule([]string{name + "_reason", "shared"}, func(binding.Subject, binding.Request, *binding.Decision) *binding.Violation {
			ran = append(ran, name)
			return v
		})
	}
	all := binding.All(rule("a", nil), rule("b", &binding.Violation{Reason: "b"}), rule("c", nil))
	v := all.Check(binding.Subject{}, binding.Request{}, &binding.Decision{})
	if v == nil || v.Reason != "b" || fmt.Sprint(ran) != "[a b]" {
		t.Fatalf("violation %v, ran %v", v, ran)
	}
	if got := fmt.Sprint(all.Reasons()); got != "[a_reason shared b_reason c_reason]" {
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
		v := rule.Check(binding.Subject{Caller: &authn.Caller{Username: tt.user}}, binding.Request{System: tt.system}, &binding.Decision{})
		if (v == nil) != tt.ok || v != nil && (v.Reason != binding.ReasonPrincipalCannotRepresentSystem || v.Code != binding.PermissionDenied) {
			t.Errorf("%q for %q: %+v", tt.user, tt.system, v)
		}
	}
	if v := rule.Check(binding.Subject{Degraded: true, DegradedReason: authn.ValidatorTimeout}, binding.Request{System: "secrets-engine"}, &binding.Decision{}); v == nil || v.Code != binding.Unavailable || !v.Counted {
		t.Errorf("degraded: %+v", v)
	}
}

func TestRolesByFullOrShortMethod(t *testing.T) {
	rule := binding.Roles(binding.RoleConfig{Required: map[string]string{"GetJob": "r", "/pkg.S/Put": "w"}})
	c := &authn.Caller{Username: "u", Roles: []string{"r"}}
	if v := rule.Check(binding.Subject{Caller: c}, binding.Request{Method: "/vmafx.v1.Controller/GetJob"}, &binding.Decision{}); v != nil {
		t.Errorf("short name: %+v", v)
	}
	if v := rule.Check(binding.Subject{Caller: c}, binding.Request{Method: "/pkg.S/Put"}, &binding.Decision{}); v == nil || v.Reason != binding.ReasonRoleMissing {
		t.Errorf("full name needing another role: %+v", v)
	}
}

// TestRulesDeclareTheirReasons: each rule says every reason it gives, and
// Reasons adds the authentication failures; the table describes each one
// (a code, a sentence), so a service's violations counter starts at zero
// for exactly what it can report.
func TestRulesDeclareTheirReasons(t *testing.T) {
	for name, c := range map[string]struct {
		rule binding.Rule
		want []string
	}{
		"node":   {binding.NodeBinding(binding.NodeConfig{LocalNode: "n"}), []string{binding.ReasonNodeMismatch, binding.ReasonMissingNodeName, binding.ReasonUnboundToken}},
		"system": {binding.SystemBinding(nil), []string{binding.ReasonPrincipalCannotRepresentSystem}},
		"roles":  {binding.Roles(binding.RoleConfig{}), []string{binding.ReasonRoleMissing, binding.ReasonTenantMissing}},
	} {
		got := binding.Reasons(c.rule)
		for _, r := range append(c.want, binding.AuthenticationReasons...) {
			if !slices.Contains(got, r) {
				t.Errorf("%s: %s not among %v", name, r, got)
			}
		}
		for _, r := range got {
			if d := binding.Describe(r); !binding.Known(r) || d.Code == 0 || d.Sentence == "" {
				t.Errorf("%s: reason %s is not in the table: %+v", name, r, d)
			}
		}
	}
	if binding.Describe("token_invalid").Code != binding.Unauthenticated || binding.Describe("validator_timeout").Code != binding.Unavailable {
		t.Fatal("authentication reasons' codes")
	}
}
