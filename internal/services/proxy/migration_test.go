package proxy_test

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

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

// TestKubeRBACProxyFlags: a command line written for kube-rbac-proxy
// never stops at "unknown flag": each of its flags the migration page's
// table names is callerauth-proxy's own, accepted with a start-up warning
// naming it, or refused naming it and what to use — and the page names
// every one of them.
func TestKubeRBACProxyFlags(t *testing.T) {
	b, err := os.ReadFile("../../../docs/migrating-from-kube-rbac-proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	own := proxy.NewCommand(io.Discard).Flags()
	flag := regexp.MustCompile("`(--?[a-zA-Z0-9-]+)")
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 || strings.HasPrefix(line, "| ---") || strings.HasPrefix(line, "| kube-rbac-proxy") {
			continue
		}
		for _, m := range flag.FindAllStringSubmatch(cells[0], -1) {
			names = append(names, strings.TrimLeft(m[1], "-"))
		}
	}
	// The page's table is the list: each kube-rbac-proxy flag callerauth-proxy
	// knows (visible or not) is in it.
	own.VisitAll(func(f *pflag.Flag) {
		if f.Hidden && strings.HasPrefix(f.Usage, "kube-rbac-proxy's") && !slices.Contains(names, f.Name) {
			t.Errorf("--%s is kube-rbac-proxy's and accepted here, but the migration page's table does not name it", f.Name)
		}
	})
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"--upstream", "http://127.0.0.1:1", "--caller-audience", "a", "--allow-user", "u", "--tls-cert-file", cert, "--tls-key-file", key}
	for _, name := range names {
		f := own.Lookup(name)
		if f == nil {
			t.Errorf("--%s: unknown to callerauth-proxy", name)
			continue
		}
		arg := "--" + name
		switch {
		case f.NoOptDefVal != "":
		case f.Value.Type() == "duration":
			arg += "=1m"
		case strings.Contains(f.Value.Type(), "int") || f.Value.Type() == "float" || f.Value.Type() == "float64":
			arg += "=1"
		default:
			arg += "=x"
		}
		o, err := proxy.ParseArgs(append([]string{arg}, base...))
		if err != nil {
			t.Errorf("%s: %v", arg, err)
			continue
		}
		if !f.Hidden {
			continue // callerauth-proxy's own flag: TestMigrationPageNamesRealFlags
		}
		c, err := o.Complete()
		switch {
		case err != nil && !strings.Contains(err.Error(), "--"+name+" is kube-rbac-proxy's"):
			t.Errorf("%s: refused without naming it: %v", arg, err)
		case err == nil && !slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.HasPrefix(w, "--"+name+" is kube-rbac-proxy's") }):
			t.Errorf("%s: accepted without a warning (warnings %q)", arg, c.Warnings)
		}
	}
	if len(names) < 40 {
		t.Fatalf("only %d kube-rbac-proxy flags in the table: the page's shape changed", len(names))
	}
}
