package policy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

const certification = "../../../../examples/authzen-certification"

func loadAt(t *testing.T, dir string) (*policy.Package, *policy.Registry) {
	t.Helper()
	p, err := policy.LoadPackage(filepath.Join(dir, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.LoadRegistry(filepath.Join(dir, "registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p, r
}

func entity(typ, id, props string) policy.Entity {
	e := policy.Entity{Type: typ, ID: id}
	if props != "" {
		e.Properties = json.RawMessage(props)
	}
	return e
}

// TestPropertiesReachCedar: what the schema declares reaches Cedar —
// registry_and_request properties replacing the registry's attribute,
// action properties as the context attribute action_properties names — and
// is validated (a wrong type is invalid_evaluation); what it does not
// declare is ignored and listed, never a deny by itself.
func TestPropertiesReachCedar(t *testing.T) {
	p, reg := loadAt(t, certification)
	for _, c := range []struct {
		name    string
		e       policy.Evaluation
		allow   bool
		invalid bool
		ignored []string
	}{
		{"alice may not write an archived record", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "write", Resource: entity("record", "record-2", "")}, false, false, nil},
		{"alice described as an admin may", policy.Evaluation{Subject: entity("user", "alice", `{"role":"admin"}`), Action: "write", Resource: entity("record", "record-2", "")}, true, false, nil},
		{"record-1 described as archived", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "write", Resource: entity("record", "record-1", `{"status":"archived","owner":"bob"}`)}, false, false, []string{"resource.properties.owner"}},
		{"a declared property of another type", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "write", Resource: entity("record", "record-1", `{"status":5}`)}, false, true, nil},
		{"a null property is absent", policy.Evaluation{Subject: entity("user", "bob", `{"role":null}`), Action: "write", Resource: entity("record", "record-1", "")}, false, false, []string{"subject.properties.role"}},
		{"a soft delete", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "delete", ActionProperties: json.RawMessage(`{"soft":true,"method":"DELETE"}`), Resource: entity("record", "record-1", "")}, true, false, []string{"action.properties.method"}},
		{"a hard delete", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "delete", ActionProperties: json.RawMessage(`{"soft":false}`), Resource: entity("record", "record-1", "")}, false, false, nil},
		{"soft of another type", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "delete", ActionProperties: json.RawMessage(`{"soft":"yes"}`), Resource: entity("record", "record-1", "")}, false, true, nil},
		{"context.action is where action properties go", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "delete", Context: json.RawMessage(`{"action":{"soft":true}}`), Resource: entity("record", "record-1", "")}, false, false, []string{"context.action"}},
		{"action properties of an action that takes none", policy.Evaluation{Subject: entity("user", "alice", ""), Action: "read", ActionProperties: json.RawMessage(`{"soft":true}`), Context: json.RawMessage(`{"time":"now"}`), Resource: entity("record", "record-1", "")}, true, false, []string{"context.time", "action.properties.soft"}},
		{"a user not registered", policy.Evaluation{Subject: entity("user", "mallory", `{"role":"admin"}`), Action: "write", Resource: entity("record", "record-2", "")}, false, false, nil},
	} {
		d := p.EvaluateAuthZEN(reg, c.e)
		if d.Allow != c.allow || d.Invalid != c.invalid || !slices.Equal(d.Ignored, c.ignored) {
			t.Errorf("%s: allow %t invalid %t ignored %q (%s %s); want %t %t %q", c.name, d.Allow, d.Invalid, d.Ignored, d.Reason, d.Detail, c.allow, c.invalid, c.ignored)
		}
	}
}

// TestRequiredMembers: a package can require a member of the request's
// properties or context; its absence is invalid_evaluation, naming it.
func TestRequiredMembers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("manifest.json", `{"package_id":"req","policy_version":"v1","api":"authzen","authzen":{
		"subjects":{"user":{"entity_type":"U","attributes":"registry"}},
		"resources":{"doc":{"entity_type":"Doc","attributes":"request"}}}}`)
	write("schema.cedarschema", `entity U; entity Doc = { level: Long }; action view appliesTo { principal: U, resource: Doc, context: { ip: String } };`)
	write("p.cedar", `@reason("low_level") permit (principal, action == Action::"view", resource) when { resource.level < 3 && context.ip != "" };`)
	reg := filepath.Join(t.TempDir(), "registry.json")
	if err := os.WriteFile(reg, []byte(`[{"uid":{"type":"U","id":"u"},"attrs":{},"parents":[]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadPackage(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.LoadRegistry(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, props, ctx string
		allow            bool
		detail           string
	}{
		{"both present", `{"level":1,"color":"red"}`, `{"ip":"10.0.0.1","time":"t"}`, true, ""},
		{"no level", `{"color":"red"}`, `{"ip":"10.0.0.1"}`, false, "level"},
		{"no ip", `{"level":1}`, `{"time":"t"}`, false, "ip"},
		{"no context at all", `{"level":1}`, ``, false, "ip"},
	} {
		e := policy.Evaluation{Subject: entity("user", "u", ""), Action: "view", Resource: entity("doc", "d", c.props)}
		if c.ctx != "" {
			e.Context = json.RawMessage(c.ctx)
		}
		d := p.EvaluateAuthZEN(r, e)
		if d.Allow != c.allow || (c.detail != "" && (!d.Invalid || d.Reason != policy.ReasonInvalidEvaluation || !strings.Contains(d.Detail, c.detail))) {
			t.Errorf("%s: %+v; want allow %t, or invalid_evaluation naming %q", c.name, d, c.allow, c.detail)
		}
	}
}
