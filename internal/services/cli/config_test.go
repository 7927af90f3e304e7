package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/services/cli"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
)

// TestConfigConvert: the vmafx tenants file and the oidc issuers file
// become AuthenticationConfigurations the services take (the controller's
// one tenant per issuer included); the differences are warned of; a file
// of neither form, or already converted, is refused naming it.
func TestConfigConvert(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("convert-test")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tenants := write("tenants.yaml", "tenants:\n  - name: tenant-a\n    issuer: https://idp.a.example\n    audiences: [vmafx-controller]\n    ca_file: "+caFile+
		"\n  - name: tenant-b\n    issuer: https://idp.b.example\n    discovery_url: https://127.0.0.1:9/b\n    audiences: [vmafx-controller]\n    roles_claim: roles\n    tenant_claim: tenant\nleeway: 30s\n")
	out := filepath.Join(dir, "authn.yaml")
	r := execute(context.Background(), t, "", time.Time{}, "config", "convert", tenants, "--out", out)
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, w := range []string{"leeway 30s", "tenant_claim tenant"} {
		if !strings.Contains(r.stderr.String(), w) {
			t.Errorf("no warning of %q in %q", w, r.stderr.String())
		}
	}
	cfg, err := authconfig.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.CheckTenantPerIssuer(cfg); err != nil {
		t.Fatalf("the controller refuses the converted tenants: %v", err)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "discoveryURL: https://127.0.0.1:9/b/.well-known/openid-configuration") || !strings.Contains(string(b), "BEGIN CERTIFICATE") {
		t.Fatalf("converted:\n%s", b)
	}
	issuers := write("issuers.json", `{"issuers": [{"issuer": "https://idp.c.example", "audiences": ["pdp"], "tenant": "c", "roles_claim": "roles"}]}`)
	if r := execute(context.Background(), t, "", time.Time{}, "config", "convert", issuers); r.err != nil || !strings.Contains(r.stdout.String(), "kind: AuthenticationConfiguration") {
		t.Fatalf("issuers file: %v\n%s", r.err, r.stdout.String())
	}
	if r := execute(context.Background(), t, "", time.Time{}, "config", "check", out); r.err != nil || !strings.Contains(r.stdout.String(), "issuer https://idp.b.example: audiences [vmafx-controller], tenant tenant-b") {
		t.Fatalf("check: %v\n%s", r.err, r.stdout.String())
	}
	for name, c := range map[string]struct{ file, want string }{
		"already converted": {out, "already an AuthenticationConfiguration"},
		"neither form":      {write("other.yaml", "foo: 1\n"), "neither an issuers file"},
		"jwks_url":          {write("jwks.json", `{"issuers": [{"issuer": "https://d.example", "audiences": ["x"], "jwks_url": "https://d.example/keys"}]}`), "jwks_url"},
	} {
		if r := execute(context.Background(), t, "", time.Time{}, "config", "convert", c.file); r.err == nil || !strings.Contains(r.err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, r.err, c.want)
		}
	}
}

// TestTenantWorkNeedsItsStateDir: a tenant identity provider's client or
// --subject token without --state-dir would come from the default dev
// issuer, whose iss no tenant configuration names: refused, saying what to
// give; with the tenant issuer's --state-dir it is minted.
func TestTenantWorkNeedsItsStateDir(t *testing.T) {
	state := t.TempDir()
	run := func(args ...string) error {
		var out strings.Builder
		return cli.Execute(context.Background(), &cli.Options{Stdout: &out, Stderr: &out, Getenv: func(k string) string {
			if k == "XDG_STATE_HOME" {
				return state
			}
			return ""
		}}, args)
	}
	for _, args := range [][]string{
		{"token", "mint", "--subject", "ci-a", "--audience", "vmafx-controller"},
		{"issuer", "client", "--client-id", "node-a1", "--subject", "node-a1", "--audience", "vmafx-controller", "--secret-file", filepath.Join(t.TempDir(), "s")},
	} {
		if err := run(args...); err == nil || !strings.Contains(err.Error(), "no --state-dir: this would use the default dev issuer") {
			t.Errorf("%v: %v", args, err)
		}
	}
	tenant := filepath.Join(t.TempDir(), "idp-a")
	if err := run("token", "mint", "--state-dir", tenant, "--issuer", "https://idp.tenant-a.example", "--subject", "ci-a", "--audience", "vmafx-controller"); err != nil {
		t.Fatal(err)
	}
	// The service-account tokens of the default issuer need no --state-dir.
	if err := run("token", "mint", "--service-account", "ns:sa", "--audience", "x"); err != nil {
		t.Fatal(err)
	}
}
