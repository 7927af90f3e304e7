package oidc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn/oidc"
)

func TestLoadConfigFile(t *testing.T) {
	write := func(t *testing.T, body string) string {
		p := filepath.Join(t.TempDir(), "issuers.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := oidc.LoadConfigFile(write(t, `{"issuers": [{"issuer": "https://a.example", "audiences": ["svc"], "tenant": "a", "roles_claim": "roles"},
		{"issuer": "https://b.example", "jwks_url": "https://b.example/keys", "audiences": ["svc"], "tenant_claim": "tenant"}], "leeway": "30s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Issuers) != 2 || cfg.Issuers[0].Tenant != "a" || cfg.Issuers[0].RolesClaim != "roles" || cfg.Issuers[1].JWKSURL != "https://b.example/keys" ||
		cfg.Issuers[1].TenantClaim != "tenant" || cfg.Leeway != 30*time.Second {
		t.Fatalf("%+v", cfg)
	}
	if _, err := oidc.New(cfg); err != nil {
		t.Fatalf("New refuses what LoadConfigFile accepted: %v", err)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"unknown key", `{"issuers": [{"issuer": "https://a.example", "audiences": ["svc"], "tenantt": "a"}]}`, `unknown field "tenantt"`},
		{"key twice", `{"issuers": [{"issuer": "https://a.example", "issuer": "https://evil.example", "audiences": ["svc"]}]}`, `"issuer" appears more than once`},
		{"no audiences", `{"issuers": [{"issuer": "https://a.example"}]}`, "at least one non-empty audience"},
		{"plain http", `{"issuers": [{"issuer": "http://a.example", "audiences": ["svc"]}]}`, "https"},
		{"an HMAC algorithm", `{"issuers": [{"issuer": "https://a.example", "audiences": ["svc"], "algorithms": ["HS256"]}]}`, `algorithm "HS256" is not allowed`},
		{"bad leeway", `{"issuers": [{"issuer": "https://a.example", "audiences": ["svc"]}], "leeway": "soon"}`, `leeway "soon"`},
		{"no issuers", `{"issuers": []}`, "at least one issuer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := oidc.LoadConfigFile(write(t, tt.body)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestParseLeeway: the one leeway parser of the issuers files.
func TestParseLeeway(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "0s": 0, "1m": time.Minute, "90s": 90 * time.Second} {
		if got, err := oidc.ParseLeeway(in); err != nil || got != want {
			t.Errorf("ParseLeeway(%q) = %s, %v", in, got, err)
		}
	}
	for _, in := range []string{"-1s", "soon", "1"} {
		if _, err := oidc.ParseLeeway(in); err == nil || !strings.Contains(err.Error(), `leeway "`+in+`"`) {
			t.Errorf("ParseLeeway(%q): %v", in, err)
		}
	}
}
