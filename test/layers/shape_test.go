package layers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// services are the programs with the one start-up shape.
var services = []string{"pdp", "proxy", "connector", "vmafx/controller", "vmafx/node", "vmafx/operator", "refresher"}

// shape is the order of a service's options.go: the flags, their
// defaults, their registration, the check, the completed configuration
// and what completes it. docs/development.md says it once.
var shape = []string{"type Options", "func NewOptions", "method AddFlags", "method Validate", "type Config", "method Complete"}

// TestOneStartUpShape: every service's options live in options.go, in the
// one order, and Validate is Complete with the configuration discarded —
// never the other way round.
func TestOneStartUpShape(t *testing.T) {
	for _, svc := range services {
		dir := filepath.Join("../../internal/services", svc)
		{
			var got []string
			for name, f := range parseDir(t, dir) {
				for _, d := range f.Decls {
					k, body, recv := declKey(d)
					if !slices.Contains(shape, k) {
						continue
					}
					if filepath.Base(name) != "options.go" {
						t.Errorf("%s: %s is in %s, not options.go", svc, k, filepath.Base(name))
						continue
					}
					got = append(got, k)
					calls := callsOf(body, recv)
					switch k {
					case "method Validate":
						if !calls["Complete"] {
							t.Errorf("%s: Validate does not call its own Complete", svc)
						}
					case "method Complete":
						if calls["Validate"] {
							t.Errorf("%s: Complete calls Validate; Validate is Complete with the configuration discarded", svc)
						}
					}
				}
			}
			if strings.Join(got, ", ") != strings.Join(shape, ", ") {
				t.Errorf("%s/options.go declares %q; want %q, in that order", svc, got, shape)
			}
		}
	}
}

// declKey names a top-level declaration as shape does; for a method of
// Options, its body and its receiver's name.
func declKey(d ast.Decl) (key string, body *ast.BlockStmt, recv string) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv != nil {
			t := d.Recv.List[0].Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			if id, ok := t.(*ast.Ident); ok && id.Name == "Options" && len(d.Recv.List[0].Names) > 0 {
				return "method " + d.Name.Name, d.Body, d.Recv.List[0].Names[0].Name
			}
			return "", nil, ""
		}
		return "func " + d.Name.Name, d.Body, ""
	case *ast.GenDecl:
		for _, s := range d.Specs {
			if ts, ok := s.(*ast.TypeSpec); ok {
				return "type " + ts.Name.Name, nil, ""
			}
		}
	}
	return "", nil, ""
}

// callsOf are the methods body calls on its receiver recv (o.Complete()).
func callsOf(body *ast.BlockStmt, recv string) map[string]bool {
	calls := map[string]bool{}
	if body == nil {
		return calls
	}
	ast.Inspect(body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if f, ok := c.Fun.(*ast.SelectorExpr); ok {
				if x, ok := f.X.(*ast.Ident); ok && x.Name == recv {
					calls[f.Sel.Name] = true
				}
			}
		}
		return true
	})
	return calls
}

// TestValidateIsCompleteDiscarded: the options that services embed (the
// caller stack's, the skeleton's) keep the same direction: a Complete
// never calls its own Validate.
func TestValidateIsCompleteDiscarded(t *testing.T) {
	for _, dir := range []string{"callers", "internal/serve"} {
		{
			for _, f := range parseDir(t, filepath.Join("../..", dir)) {
				for _, d := range f.Decls {
					if k, body, recv := declKey(d); k == "method Complete" && callsOf(body, recv)["Validate"] {
						t.Errorf("%s: Options.Complete calls its own Validate; Validate is Complete with the configuration discarded", dir)
					}
				}
			}
		}
	}
}

// parseDir parses the Go files of dir, tests aside, in name order.
func parseDir(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}
