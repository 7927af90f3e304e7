package layers_test

import (
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mainTypes are the type `go doc` opens each library package on; "" is
// a package whose doc itself is the way in (it has no type of its own).
var mainTypes = map[string]string{
	"reason":           "Reason",
	"token":            "Source",
	"credentials":      "Config",
	"bearer":           "Credential",
	"authn":            "Authenticator",
	"authn/kube":       "Authenticator",
	"authn/oidc":       "Authenticator",
	"authn/authconfig": "",
	"callers":          "Options",
	"binding":          "Rule",
	"guard":            "Guard",
	"decision":         "Signer",
	"devissuer":        "Issuer",
}

// TestMainTypesShowUse: `go doc <package> <main type>` shows code that
// uses it — a code block in the type's doc comment — because go doc does
// not print the testable Examples.
func TestMainTypesShowUse(t *testing.T) {
	for pkg, typ := range mainTypes {
		if _, ok := budgets[pkg]; !ok {
			t.Errorf("%s: a main type for a package with no budget (not a library package?)", pkg)
		}
		fset := token.NewFileSet()
		dir := filepath.Join("..", "..", pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []*ast.File
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		p, err := doc.NewFromFiles(fset, files, module+pkg)
		if err != nil {
			t.Fatal(err)
		}
		text, what := p.Doc, "the package doc"
		if typ != "" {
			text, what = "", "type "+typ
			for _, ty := range p.Types {
				if ty.Name == typ {
					text = ty.Doc
				}
			}
		}
		if !hasCode(p, text) {
			t.Errorf("%s: %s's doc comment shows no code (a tab-indented block of its use)", pkg, what)
		}
	}
	for p := range budgets {
		if _, ok := mainTypes[p]; !ok {
			t.Errorf("library package %s names no main type here", p)
		}
	}
}

func hasCode(p *doc.Package, text string) bool {
	for _, b := range p.Parser().Parse(text).Content {
		if _, ok := b.(*comment.Code); ok {
			return true
		}
	}
	return false
}
