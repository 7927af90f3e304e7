package credentials_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/credentials"
)

// FuzzLoad feeds arbitrary configuration files to Load. It must never panic;
// a file it accepts must yield a Config that Validate can judge, and an
// error must name where it came from.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"",
		"controller:\n  tls: true\n  token_file: /t\n",
		"controller:\n  tls: maybe\n",
		"controller: [1, 2]\n",
		"controller:\n  ca_file: {a: b}\n",
		"controller:\n  token_file: null\n",
		"{\"controller\": {\"tls\": false, \"address\": \"unix:///s\"}}",
		"controller:\n  unknown: 1\n",
		"- a\n- b\n",
		"controller: &a\n  tls: *a\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := credentials.Load("controller", credentials.FromFile(p))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "credentials: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		_ = cfg.Validate()
	})
}
