package proxy_test

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/proxy"
)

// TestMigrationPageNamesRealFlags: every callerauth-proxy flag the
// migration page's table names is one the proxy has.
func TestMigrationPageNamesRealFlags(t *testing.T) {
	b, err := os.ReadFile("../../../docs/migrating-from-kube-rbac-proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := proxy.NewCommand(io.Discard).Flags()
	flag := regexp.MustCompile("`(--[a-z0-9-]+)")
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 || strings.HasPrefix(line, "| ---") || strings.HasPrefix(line, "| kube-rbac-proxy") {
			continue
		}
		for _, m := range flag.FindAllStringSubmatch(cells[1], -1) {
			seen++
			if flags.Lookup(strings.TrimPrefix(m[1], "--")) == nil {
				t.Errorf("the migration page names %s, which callerauth-proxy does not have (row %q)", m[1], line)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("only %d flags found in the table: the page's shape changed", seen)
	}
}
