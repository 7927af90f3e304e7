package policy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

const example = "../../../../examples/secrets-engine"

func load(t *testing.T) (*policy.Package, *policy.Registry) {
	t.Helper()
	return loadAt(t, example)
}

func request(t *testing.T, name string) policy.Request {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(example, name))
	if err != nil {
		t.Fatal(err)
	}
	var r policy.Request
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestExamplePackage(t *testing.T) {
	p, reg := load(t)
	if p.ID != "secrets-engine" || p.Version != "v2" || !strings.HasPrefix(p.Digest, "sha256:") || !strings.HasPrefix(reg.Digest, "sha256:") {
		t.Fatalf("package %+v registry %s", p, reg.Digest)
	}
	allow := request(t, "check_request_allow_rotate.json")
	tests := []struct {
		name   string
		change func(*policy.Request)
		allow  bool
		reason string
	}{
		{"the seed's positive request", func(*policy.Request) {}, true, "catalog_lane_policy_matched"},
		{"a forbidden field: the forbid names its reason", func(r *policy.Request) { r.Fields = append(r.Fields, "private_key") }, false, "private_key_fields_forbidden"},
		{"another system", func(r *policy.Request) { r.System = "ops-warden" }, false, "no_policy_matched"},
		{"a known subject outside the lane", func(r *policy.Request) { r.Subject = "svc-payroll" }, false, "no_policy_matched"},
		{"another action", func(r *policy.Request) { r.Stage = "read" }, false, "no_policy_matched"},
		// The probe that found the hole: a tenant and lane the policy never
		// looked at were signed into an allow.
		{"a tenant not in the registry", func(r *policy.Request) { r.Tenant, r.Lane = "evil-corp", "billing" }, false, "tenant_unknown"},
		{"another tenant's name on this lane", func(r *policy.Request) { r.Tenant = "globex" }, false, "lane_not_in_tenant"},
		{"another lane of the tenant, the resource not in it", func(r *policy.Request) { r.Lane = "billing" }, false, "resource_not_in_lane"},
		{"a lane not in the registry", func(r *policy.Request) { r.Lane = "shadow" }, false, "lane_unknown"},
		{"a resource in another lane", func(r *policy.Request) { r.Resource = "invoice-db" }, false, "resource_not_in_lane"},
		{"a resource not in the registry", func(r *policy.Request) { r.Resource = "root-ca-key" }, false, "resource_unknown"},
		{"a subject not in the registry", func(r *policy.Request) { r.Subject = "intruder" }, false, "subject_unknown"},
		{"a stage that is no action", func(r *policy.Request) { r.Stage = "exfiltrate" }, false, "stage_unknown"},
		// Consistent, known, and another tenant's: the policy decides (and
		// names tenant acme).
		{"another tenant's lane, resource and member", func(r *policy.Request) {
			r.Tenant, r.Lane, r.Resource, r.Subject = "globex", "payroll", "payroll-db", "svc-payroll"
		}, false, "no_policy_matched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := allow
			r.Fields = append([]string{}, allow.Fields...)
			tt.change(&r)
			d := p.Evaluate(reg, r)
			if d.Allow != tt.allow || d.Reason != tt.reason {
				t.Fatalf("decision %+v; want allow=%v reason=%s", d, tt.allow, tt.reason)
			}
		})
	}
	deny := p.Evaluate(reg, request(t, "check_request_deny_private_key.json"))
	if deny.Allow || deny.Reason != "private_key_fields_forbidden" {
		t.Fatalf("the example denied request: %+v", deny)
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestPackageRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(dir string)
		want string
	}{
		{"policy naming an unknown entity type", func(d string) {
			_ = os.WriteFile(filepath.Join(d, "bad.cedar"), []byte(`@reason("x") permit (principal == Robot::"r", action, resource);`), 0o600)
		}, "does not match the schema"},
		{"policy using an unknown context attribute", func(d string) {
			_ = os.WriteFile(filepath.Join(d, "bad.cedar"), []byte(`@reason("x") permit (principal, action == Action::"read", resource) when { context.colour == "red" };`), 0o600)
		}, "does not match the schema"},
		{"syntax error", func(d string) { _ = os.WriteFile(filepath.Join(d, "bad.cedar"), []byte(`permit (`), 0o600) }, "bad.cedar"},
		{"manifest without a version", func(d string) {
			_ = os.WriteFile(filepath.Join(d, "manifest.json"), []byte(`{"package_id":"x"}`), 0o600)
		}, "policy_version are required"},
		{"manifest with an unknown key", func(d string) {
			_ = os.WriteFile(filepath.Join(d, "manifest.json"), []byte(`{"package_id":"x","policy_version":"v1","extra":1}`), 0o600)
		}, "unknown field"},
		{"no schema", func(d string) { _ = os.Remove(filepath.Join(d, "schema.cedarschema")) }, "no *.cedarschema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, filepath.Join(example, "policy"))
			tt.edit(dir)
			_, err := policy.LoadPackage(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct{ name, registry, want string }{
		{"registry entity of an unknown type", `[{"uid":{"type":"Tenant","id":"t"},"attrs":{},"parents":[]},{"uid":{"type":"Robot","id":"r"},"attrs":{},"parents":[]}]`,
			`entity 1, Robot::"r", does not match the schema of package secrets-engine v2: entity type "Robot" not found in schema`},
		{"registry entity listed twice", `[{"uid":{"type":"Tenant","id":"t"},"attrs":{},"parents":[]},{"uid":{"type":"Tenant","id":"t"},"attrs":{},"parents":[{"type":"Tenant","id":"u"}]}]`,
			`entity 1, Tenant::"t", is listed twice`},
		{"registry with a member twice", `[{"uid":{"type":"Tenant","id":"t"},"uid":{"type":"Tenant","id":"u"},"attrs":{},"parents":[]}]`, `"uid" appears more than once`},
		{"registry not a list", `{}`, "want a JSON array of Cedar entities"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := load(t)
			reg := filepath.Join(t.TempDir(), "registry.json")
			_ = os.WriteFile(reg, []byte(tt.registry), 0o600)
			if _, err := p.LoadRegistry(reg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestSchemaMustDescribeEveryRequest(t *testing.T) {
	for _, tt := range []struct{ name, from, to, want string }{
		{"context without the tenant", "  tenant: Tenant,\n", "", "action rotate: the context must declare tenant: Tenant"},
		{"lane as a string", "lane: Lane,", "lane: String,", "action read: the context must declare lane: Lane"},
		{"an optional member", "purpose: String,", "purpose?: String,", "must declare purpose: String"},
		{"a member the PDP does not pass", "system: String,", "system: String, colour: String,", "context member colour is not one the PDP passes"},
		{"no Tenant type", "entity Tenant;\n", "", "entity type Tenant is not declared"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, filepath.Join(example, "policy"))
			path := filepath.Join(dir, "schema.cedarschema")
			b, _ := os.ReadFile(path)
			edited := strings.Replace(string(b), tt.from, tt.to, 1)
			if edited == string(b) {
				t.Fatalf("the schema has no %q", tt.from)
			}
			if tt.name == "no Tenant type" {
				edited = strings.ReplaceAll(edited, "entity Lane in [Tenant];", "entity Lane;")
				edited = strings.ReplaceAll(edited, "tenant: Tenant,", "tenant: Lane,")
			}
			_ = os.WriteFile(path, []byte(edited), 0o600)
			if _, err := policy.LoadPackage(dir); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestRequestCanonical: the direct writer equals the reflective canonical
// form.
func TestRequestCanonical(t *testing.T) {
	for _, r := range []policy.Request{
		{},
		{System: "secrets-engine", Subject: "svc-rotator", Tenant: "acme", Lane: "catalog", Resource: "db-password", Stage: "rotate", Fields: []string{"password"}, Purpose: "scheduled rotation"},
		{System: "\"\\\n\u0001", Subject: "é😀<&>", Fields: []string{"a", "\u2028", ""}, Purpose: "\t"},
	} {
		want, err := decision.CanonicalJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Canonical(); !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	}
}
