// Package layers_test holds the house to its floors: no package imports
// one on a higher floor (test files aside, which may use the kits).
package layers_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/callerauth/callerauth/"

// floors, lowest first: a package may import its own floor and the ones
// below. The library (every other top-level package) is floor 2; the kits
// stand beside the manager, for the tests and the demo; the demo, which
// runs every service, stands above them, beside the tools.
var floors = []struct {
	name     string
	prefixes []string
}{
	{"reason", []string{"reason"}},
	{"foundation and generated APIs", []string{"internal/foundation/", "api/"}},
	{"library", nil},
	{"manager and kits", []string{"internal/serve", "internal/kit/"}},
	{"services", []string{"internal/services/"}},
	{"tools and the demo", []string{"internal/tools/", "internal/demo"}},
	{"binaries", []string{"cmd/"}},
	{"tests", []string{"test/"}},
}

func floor(pkg string) int {
	rel := strings.TrimPrefix(pkg, module)
	for i, f := range floors {
		for _, p := range f.prefixes {
			if rel == strings.TrimSuffix(p, "/") || strings.HasPrefix(rel, p) {
				return i
			}
		}
	}
	return 2
}

func TestNoImportRunsUpward(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../...")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs, edges := 0, 0
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		f := strings.Fields(sc.Text())
		pkgs++
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			edges++
			if from, to := floor(f[0]), floor(imp); to > from {
				t.Errorf("%s (%s) imports %s (%s), a higher floor", strings.TrimPrefix(f[0], module), floors[from].name,
					strings.TrimPrefix(imp, module), floors[to].name)
			}
		}
	}
	if pkgs < 50 || edges < 100 {
		t.Fatalf("%d packages, %d imports of the module's own: too few for the listing to be right", pkgs, edges)
	}
}
