package policy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/pdp/policy"
)

const example = "../../../examples/secrets-engine"

func load(t *testing.T) (*policy.Package, *policy.Registry) {
	t.Helper()
	p, err := policy.LoadPackage(filepath.Join(example, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.LoadRegistry(filepath.Join(example, "registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p, r
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
		{"a resource in another lane", func(r *policy.Request) { r.Resource = "invoice-db" }, false, "no_policy_matched"},
		{"a subject outside the lane", func(r *policy.Request) { r.Subject = "intruder" }, false, "no_policy_matched"},
		{"another action", func(r *policy.Request) { r.Stage = "read" }, false, "no_policy_matched"},
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
	t.Run("registry entity of an unknown type", func(t *testing.T) {
		p, _ := load(t)
		reg := filepath.Join(t.TempDir(), "registry.json")
		_ = os.WriteFile(reg, []byte(`[{"uid":{"type":"Robot","id":"r"},"attrs":{},"parents":[]}]`), 0o600)
		if _, err := p.LoadRegistry(reg); err == nil || !strings.Contains(err.Error(), "does not match the schema") {
			t.Fatalf("err = %v", err)
		}
	})
}
