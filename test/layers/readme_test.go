package layers_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestREADMEMapMatchesFolders holds the README's map to the tree: every
// path it links exists; every library package, binary, kind of internal
// package and top-level folder is linked; and every package of
// internal/foundation, internal/kit and internal/tools is named in its
// folder's row. A folder added, moved or removed without the map fails.
func TestREADMEMapMatchesFolders(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Map\n")
	if start < 0 {
		t.Fatal("README.md has no ## Map")
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	linked := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\(([^)#]+)\)`).FindAllStringSubmatch(section, -1) {
		p := strings.TrimSuffix(m[1], "/")
		if strings.Contains(p, "://") {
			t.Errorf("the map links outside the repository: %s", p)
			continue
		}
		linked[p] = true
		if _, err := os.Stat(filepath.Join("..", "..", p)); err != nil {
			t.Errorf("the map links %s, which does not exist", p)
		}
	}
	rowOf := func(path string) string {
		for _, line := range strings.Split(section, "\n") {
			if strings.HasPrefix(line, "| [`"+path+"`]("+path+")") {
				return line
			}
		}
		return ""
	}

	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "../../...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
		switch top, _, _ := strings.Cut(rel, "/"); top {
		case "internal", "test", "examples", "api", "tools":
			continue // their folders' rows say what they hold
		case "cmd":
			if !linked[rel] {
				t.Errorf("binary %s is not in the map", rel)
			}
		default:
			// A library package, linked, or named in its parent's row
			// (devissuer/devissuertest).
			if parent, name := filepath.Dir(rel), filepath.Base(rel); !linked[rel] && !strings.Contains(rowOf(parent), "`"+name+"`") {
				t.Errorf("library package %s is not in the map", rel)
			}
		}
	}
	dirs := func(dir string) []string {
		entries, err := os.ReadDir(filepath.Join("..", "..", dir))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	for _, top := range dirs(".") {
		if !linked[top] && !slices.ContainsFunc(slices.Collect(maps.Keys(linked)), func(p string) bool { return strings.HasPrefix(p, top+"/") }) {
			t.Errorf("folder %s/ is not in the map", top)
		}
	}
	kinds := dirs("internal")
	for _, kind := range kinds {
		if !linked["internal/"+kind] {
			t.Errorf("internal/%s is not in the map", kind)
		}
	}
	for _, kind := range []string{"foundation", "kit", "tools"} {
		row := rowOf("internal/" + kind)
		for _, pkg := range dirs("internal/" + kind) {
			if !strings.Contains(row, "`"+pkg+"`") {
				t.Errorf("internal/%s/%s is not named in the map's internal/%s row", kind, pkg, kind)
			}
		}
	}
	if n := len(kinds); !strings.Contains(section, "holds "+spelled[n]+" kinds of package") {
		t.Errorf("internal/ holds %d kinds of package; the map does not say so (\"holds %s kinds of package\")", n, spelled[n])
	}
}

var spelled = map[int]string{3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
