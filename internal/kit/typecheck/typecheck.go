// Package typecheck loads the module's packages for tests that read the
// source as the compiler does (test/reasons, test/flags): `go list
// -export -deps` once, then each package type-checked from its non-test
// source against its imports' export data — go/types, no dependency
// beyond the standard library.
package typecheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Package is one package of `go list -json`.
type Package struct {
	ImportPath, Dir, Export string
	GoFiles                 []string
	Standard                bool
}

// Load lists the packages of pattern and their dependencies with export
// data (the go command builds what is missing), by import path.
func Load(t testing.TB, pattern string) map[string]*Package {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", pattern) //nolint:gosec // pattern is a test's literal package pattern.
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]*Package{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(Package)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// Checked is one package type-checked from its non-test source.
type Checked struct {
	Path  string
	Fset  *token.FileSet
	Files []*ast.File
	Info  *types.Info
	Types *types.Package
}

// Check type-checks the package at path of pkgs.
func Check(t testing.TB, pkgs map[string]*Package, path string) *Checked {
	t.Helper()
	p, ok := pkgs[path]
	if !ok {
		t.Fatalf("no package %s", path)
	}
	c := &Checked{Path: path, Fset: token.NewFileSet(), Info: &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{},
		Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}}
	for _, f := range p.GoFiles {
		file, err := parser.ParseFile(c.Fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		c.Files = append(c.Files, file)
	}
	imp := importer.ForCompiler(c.Fset, "gc", func(path string) (io.ReadCloser, error) {
		if d, ok := pkgs[path]; ok && d.Export != "" {
			return os.Open(d.Export)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	conf := types.Config{Importer: imp}
	var err error
	if c.Types, err = conf.Check(path, c.Fset, c.Files, c.Info); err != nil {
		t.Fatalf("type-checking %s: %v", path, err)
	}
	return c
}

// EachCall calls f with every call in c's code of a named function or
// method (a package's, or a method through a selector), and that function.
func (c *Checked) EachCall(f func(call *ast.CallExpr, fn *types.Func)) {
	for _, file := range c.Files {
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if fn, ok := c.Info.Uses[sel.Sel].(*types.Func); ok && fn.Pkg() != nil {
					f(call, fn)
				}
			}
			return true
		})
	}
}
