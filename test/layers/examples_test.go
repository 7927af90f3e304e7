package layers_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryLibraryPackageHasAnExample: each public package shows its use
// in a testable Example — one with an // Output: comment, which go test
// runs and compares — so that `go doc` and the package's page open on code
// that is known to work.
func TestEveryLibraryPackageHasAnExample(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{.TestGoFiles}} {{.XTestGoFiles}}", "../../...").Output()
	if err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile(`(?s)\nfunc Example[A-Za-z_]*\(\) \{.*?\n\t// Output:`)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(line))
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if !isLibrary(rel) {
			continue
		}
		n++
		found := false
		for _, name := range f[2:] {
			b, err := os.ReadFile(filepath.Join(f[1], name))
			if err != nil {
				t.Fatal(err)
			}
			found = found || example.Match(b)
		}
		if !found {
			t.Errorf("library package %s has no testable Example (func Example… with // Output:)", rel)
		}
	}
	if n < 10 {
		t.Fatalf("only %d library packages found", n)
	}
}
