package policy_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

// TestEveryFieldIsCheckedOrRefused walks every field of the check request
// — found by reflection, so a field added later has no case and fails
// here — and shows that changing it either changes the decision or is
// refused against the registry before policy runs. A decision record binds
// the whole request; a field that neither reaches the policies nor is
// checked would be signed without anyone having looked at it, which is how
// an allow for another tenant came to be signed.
func TestEveryFieldIsCheckedOrRefused(t *testing.T) {
	const dir = "testdata/every-field"
	p, err := policy.LoadPackage(dir + "/policy")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := p.LoadRegistry(dir + "/registry.json")
	if err != nil {
		t.Fatal(err)
	}
	base := policy.Request{System: "sys", Subject: "alice", Tenant: "t1", Lane: "l1", Resource: "r1", Stage: "read", Fields: []string{"f"}, Purpose: "audit"}
	if d := p.Evaluate(reg, base); !d.Allow || d.Reason != "every_field_matched" {
		t.Fatalf("the base request: %+v", d)
	}
	// Per JSON field: changes to values the registry knows (the decision
	// must change) and to values it does not (refused with the reason).
	type change struct {
		name   string
		edit   func(*policy.Request)
		reason string // the refusal; "" when the policy must decide otherwise
	}
	changes := map[string][]change{
		"system": {{"another system", func(r *policy.Request) { r.System = "other" }, ""}},
		"subject": {
			{"another member of the lane", func(r *policy.Request) { r.Subject = "bob" }, ""},
			{"an unknown subject", func(r *policy.Request) { r.Subject = "mallory" }, policy.ReasonSubjectUnknown},
		},
		"tenant": {
			{"a tenant that does not hold the lane", func(r *policy.Request) { r.Tenant = "t2" }, policy.ReasonLaneNotInTenant},
			{"another tenant with its own lane holding the resource", func(r *policy.Request) { r.Tenant, r.Lane = "t2", "l3" }, ""},
			{"an unknown tenant", func(r *policy.Request) { r.Tenant = "evil-corp" }, policy.ReasonTenantUnknown},
		},
		"lane": {
			{"another lane of the tenant holding the resource", func(r *policy.Request) { r.Lane = "l2" }, ""},
			{"a lane of another tenant", func(r *policy.Request) { r.Lane = "l3" }, policy.ReasonLaneNotInTenant},
			{"an unknown lane", func(r *policy.Request) { r.Lane = "billing" }, policy.ReasonLaneUnknown},
		},
		"resource": {
			{"another resource in the lane", func(r *policy.Request) { r.Resource = "r2" }, ""},
			{"a resource outside the lane", func(r *policy.Request) { r.Lane = "l2"; r.Resource = "r2" }, policy.ReasonResourceNotInLane},
			{"an unknown resource", func(r *policy.Request) { r.Resource = "db-password" }, policy.ReasonResourceUnknown},
		},
		"stage": {
			{"another action", func(r *policy.Request) { r.Stage = "rotate" }, ""},
			{"an unknown action", func(r *policy.Request) { r.Stage = "exfiltrate" }, policy.ReasonStageUnknown},
		},
		"fields": {
			{"another field", func(r *policy.Request) { r.Fields = []string{"g"} }, ""},
			{"one more field", func(r *policy.Request) { r.Fields = []string{"f", "g"} }, ""},
			{"no field", func(r *policy.Request) { r.Fields = []string{} }, ""},
		},
		"purpose": {{"another purpose", func(r *policy.Request) { r.Purpose = "curiosity" }, ""}},
	}
	rt := reflect.TypeFor[policy.Request]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		cases, ok := changes[name]
		if !ok {
			t.Errorf("check request field %q has no case here: make the PDP refuse it against the registry or pass it to the policies (CedarRequest), then add it", name)
			continue
		}
		delete(changes, name)
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				r := base
				r.Fields = slices.Clone(base.Fields)
				c.edit(&r)
				d := p.Evaluate(reg, r)
				if c.reason != "" {
					if d.Allow || d.Reason != c.reason || len(d.Policies) != 0 {
						t.Fatalf("decision %+v; want refused with %s before policy", d, c.reason)
					}
					return
				}
				if d.Allow || !slices.Contains(policy.RegistryReasons, d.Reason) && d.Reason != policy.ReasonNoPolicyMatched {
					t.Fatalf("decision %+v; want the policy to decide otherwise than for the base request", d)
				}
				if slices.Contains(policy.RegistryReasons, d.Reason) {
					t.Fatalf("decision %+v: refused, but this change is consistent with the registry", d)
				}
				if reflect.DeepEqual(policy.CedarRequest(r), policy.CedarRequest(base)) {
					t.Fatal("the Cedar request did not change: the field does not reach the policies")
				}
			})
		}
	}
	for name := range changes {
		t.Errorf("case for %q, which is not a field of the check request", name)
	}
}
