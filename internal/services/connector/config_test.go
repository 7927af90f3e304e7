package connector_test

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/services/connector"
)

func TestParseAuthConfig(t *testing.T) {
	good := `{"enableNodeBindingAuth": true, "AuthAudience": "platform-connector.nvsentinel.nvidia.com",
		"AuthCrossNodeServiceAccounts": ["system:serviceaccount:nvsentinel:csp-health-monitor"], "AuthMode": "audit", "AuthFailOpenOnUnavailable": true}`
	cfg, err := connector.ParseAuthConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.EnableNodeBindingAuth || cfg.Audience != "platform-connector.nvsentinel.nvidia.com" || cfg.Mode != guard.Audit || !cfg.FailOpenOnUnavailable ||
		!slices.Equal(cfg.CrossNodeServiceAccounts, []string{"system:serviceaccount:nvsentinel:csp-health-monitor"}) {
		t.Fatalf("cfg %+v", cfg)
	}
	cfg, err = connector.ParseAuthConfig([]byte(`{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": []}`))
	if err != nil || cfg.Mode != guard.Enforce || cfg.FailOpenOnUnavailable || len(cfg.CrossNodeServiceAccounts) != 0 {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	if cfg, err := connector.ParseAuthConfig([]byte(`{"enableNodeBindingAuth": false}`)); err != nil || cfg.EnableNodeBindingAuth {
		t.Fatalf("disabled: %+v %v", cfg, err)
	}
}

func TestParseAuthConfigRefusals(t *testing.T) {
	base := `"AuthAudience": "a", "AuthCrossNodeServiceAccounts": []`
	tests := []struct {
		name, json string
		wants      []string
	}{
		{"enableNodeBindingAuth missing", `{` + base + `}`, []string{"enableNodeBindingAuth is required and has no default"}},
		{"quoted false", `{"enableNodeBindingAuth": "false", ` + base + `}`, []string{"enableNodeBindingAuth", `"false"`, "real boolean"}},
		{"null", `{"enableNodeBindingAuth": null, ` + base + `}`, []string{"enableNodeBindingAuth is null"}},
		{"zero", `{"enableNodeBindingAuth": 0, ` + base + `}`, []string{"enableNodeBindingAuth is 0"}},
		{"cross-node list missing", `{"enableNodeBindingAuth": true, "AuthAudience": "a"}`, []string{"AuthCrossNodeServiceAccounts is required as an explicit list"}},
		{"cross-node null", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": null}`, []string{"AuthCrossNodeServiceAccounts is null"}},
		{"cross-node not a list", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": "system:serviceaccount:a:b"}`, []string{"want a list of strings"}},
		{"entry with a trailing space", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": ["system:serviceaccount:ns:mon "]}`, []string{`AuthCrossNodeServiceAccounts[0] "system:serviceaccount:ns:mon "`, "whitespace"}},
		{"entry with uppercase", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": ["system:serviceaccount:NS:mon"]}`, []string{"uppercase"}},
		{"entry not canonical", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": ["csp-health-monitor"]}`, []string{"want system:serviceaccount:<namespace>:<name>"}},
		{"namespace too long", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": ["system:serviceaccount:` + strings.Repeat("n", 64) + `:mon"]}`, []string{"namespace"}},
		{"name not a subdomain", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": ["system:serviceaccount:ns:mon_1"]}`, []string{`name "mon_1"`}},
		{"empty name", `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": ["system:serviceaccount:ns:"]}`, []string{`name ""`}},
		{"audience missing", `{"enableNodeBindingAuth": true, "AuthCrossNodeServiceAccounts": []}`, []string{"AuthAudience is required"}},
		{"audience not a string", `{"enableNodeBindingAuth": true, "AuthAudience": 5, "AuthCrossNodeServiceAccounts": []}`, []string{"AuthAudience is 5"}},
		{"mode warn", `{"enableNodeBindingAuth": true, ` + base + `, "AuthMode": "warn"}`, []string{`AuthMode is "warn"`}},
		{"fail-open quoted", `{"enableNodeBindingAuth": true, ` + base + `, "AuthFailOpenOnUnavailable": "true"}`, []string{"AuthFailOpenOnUnavailable", "real boolean"}},
		{"unknown key", `{"enableNodeBindingAuth": true, ` + base + `, "AuthMdoe": "audit"}`, []string{`unknown key "AuthMdoe"`}},
		// The probe's case: the second value switched authentication off.
		{"key written twice", `{"enableNodeBindingAuth": true, ` + base + `, "enableNodeBindingAuth": false}`, []string{`key "enableNodeBindingAuth"`, "more than once"}},
		{"key written twice, escaped", `{"enableNodeBindingAuth": true, ` + base + `, "AuthMode": "enforce", "Auth\u004dode": "audit"}`, []string{`key "AuthMode"`, "more than once"}},
		{"invalid UTF-8 in a value", "{\"enableNodeBindingAuth\": true, \"AuthAudience\": \"a\xff\", \"AuthCrossNodeServiceAccounts\": []}", []string{`key "AuthAudience"`, "UTF-8"}},
		{"not an object", `[]`, []string{"not a JSON object"}},
		{"null document", `null`, []string{"null"}},
		{"two problems at once", `{"enableNodeBindingAuth": "yes", "AuthCrossNodeServiceAccounts": null}`, []string{"enableNodeBindingAuth", "AuthCrossNodeServiceAccounts is null"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := connector.ParseAuthConfig([]byte(tt.json))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadAuthConfigNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := connector.LoadAuthConfig(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v", err)
	}
	if _, err := connector.LoadAuthConfig(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("err = %v", err)
	}
}

func FuzzParseAuthConfig(f *testing.F) {
	for _, s := range []string{`{}`, `{"enableNodeBindingAuth": true, "AuthAudience": "a", "AuthCrossNodeServiceAccounts": []}`, `null`, `[]`, `{"enableNodeBindingAuth": "false"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := connector.ParseAuthConfig([]byte(s))
		if err == nil && cfg.EnableNodeBindingAuth && cfg.Audience == "" {
			t.Fatalf("enabled without an audience: %q", s)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "connector: ") {
			t.Fatalf("error without the package prefix: %v", err)
		}
	})
}

// TestFormerFlagNames: --auth-cache-ttl and --auth-review-timeout set the
// very values of --caller-cache-ttl and --caller-review-timeout (0 included:
// no cache).
func TestFormerFlagNames(t *testing.T) {
	cmd := connector.NewCommand(io.Discard, io.Discard, func(string) string { return "" })
	if err := cmd.ParseFlags([]string{"--auth-cache-ttl", "0", "--auth-review-timeout", "3s"}); err != nil {
		t.Fatal(err)
	}
	f := cmd.Flags()
	if ttl, rt := f.Lookup("caller-cache-ttl").Value.String(), f.Lookup("caller-review-timeout").Value.String(); ttl != "0s" || rt != "3s" {
		t.Fatalf("--caller-cache-ttl %s, --caller-review-timeout %s; want 0s and 3s", ttl, rt)
	}
}
