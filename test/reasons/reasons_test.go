// Package reasons_test walks every service's refusals in its source, type
// checked: each reason a service's code names is a declared value
// (reason.New in a package-level variable, one word one meaning across
// the module), each is in the list the service says it can send
// (Reasons()), each of those is documented, and no service builds a
// refusal by hand (a gRPC status or an HTTP error without a reason).
package reasons_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/kit/typecheck"
	"github.com/callerauth/callerauth/internal/services/connector"
	"github.com/callerauth/callerauth/internal/services/pdp"
	"github.com/callerauth/callerauth/internal/services/proxy"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
	"github.com/callerauth/callerauth/reason"
)

const (
	module     = "github.com/callerauth/callerauth"
	reasonPath = module + "/reason"
)

// services are the processes that answer callers: the packages whose code
// is theirs, the reasons they say they send, and the page that documents
// them. The vmafx node and operator answer no caller (they call the
// controller); they are walked for hand-built refusals all the same.
var services = []struct {
	name     string
	packages []string
	reasons  []reason.Reason
	doc      string
}{
	{"pdp", []string{"internal/services/pdp", "internal/services/pdp/policy"}, pdp.Reasons(), "pdp.md"},
	{"platform-connector", []string{"internal/services/connector"}, connector.Reasons(), "platform-connector.md"},
	{"vmafx-controller", []string{"internal/services/vmafx/controller"}, controller.Reasons(), "vmafx.md"},
	{"callerauth-proxy", []string{"internal/services/proxy"}, proxy.Reasons(), "proxy.md"},
	{"vmafx-node", []string{"internal/services/vmafx/node", "internal/services/vmafx/measure"}, nil, ""},
	{"vmafx-operator", []string{"internal/services/vmafx/operator"}, nil, ""},
}

// listed is one package of `go list -json`; checked one package
// type-checked (internal/kit/typecheck).
type (
	listed  = typecheck.Package
	checked struct{ *typecheck.Checked }
)

func load(t *testing.T) map[string]*listed { return typecheck.Load(t, "../../...") }

func check(t *testing.T, pkgs map[string]*listed, path string) *checked {
	return &checked{typecheck.Check(t, pkgs, path)}
}

func isReason(tp types.Type) bool {
	n, ok := tp.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == reasonPath && n.Obj().Name() == "Reason"
}

// referenced are the package-level reason variables code names, by
// "package.Name".
func (c *checked) referenced() map[string]*types.Var {
	out := map[string]*types.Var{}
	for _, obj := range c.Info.Uses {
		v, ok := obj.(*types.Var)
		if !ok || !isReason(v.Type()) || v.Pkg() == nil || v.Parent() != v.Pkg().Scope() {
			continue
		}
		out[v.Pkg().Path()+"."+v.Name()] = v
	}
	return out
}

// calls are the calls in c's code of the functions of package pkgPath
// named in names, as "file:line: pkg.Name".
func (c *checked) calls(pkgPath string, names ...string) []string {
	var out []string
	c.EachCall(func(call *ast.CallExpr, fn *types.Func) {
		if fn.Pkg().Path() == pkgPath && slices.Contains(names, fn.Name()) {
			out = append(out, fmt.Sprintf("%s: %s.%s", c.Fset.Position(call.Pos()), fn.Pkg().Name(), fn.Name()))
		}
	})
	return out
}

// declarations are the reason.New calls of c: each must initialise a
// package-level variable with a literal word.
func (c *checked) declarations(t *testing.T) map[string]string {
	t.Helper()
	words := map[string]string{}
	top := map[*ast.CallExpr]bool{}
	for _, f := range c.Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, v := range s.(*ast.ValueSpec).Values {
					if call, ok := v.(*ast.CallExpr); ok {
						top[call] = true
					}
				}
			}
		}
	}
	c.EachCall(func(call *ast.CallExpr, fn *types.Func) {
		if fn.Pkg().Path() != reasonPath || fn.Name() != "New" {
			return
		}
		pos := c.Fset.Position(call.Pos())
		lit, isLit := call.Args[0].(*ast.BasicLit)
		switch {
		case !top[call]:
			t.Errorf("%s: reason.New outside a package-level variable: a reason is declared once, by its owner", pos)
		case !isLit || lit.Kind != token.STRING:
			t.Errorf("%s: reason.New with a word that is not a literal", pos)
		default:
			w, _ := strconv.Unquote(lit.Value)
			words[w] = pos.String()
		}
	})
	return words
}

// TestEveryRefusalIsDeclared is the walk: the module's declarations, then
// each service's refusals.
func TestEveryRefusalIsDeclared(t *testing.T) {
	pkgs := load(t)
	declared := map[string]string{} // word → where
	for path, p := range pkgs {
		if p.Standard || !strings.HasPrefix(path, module) || len(p.GoFiles) == 0 || !slices.Contains(importsOf(t, p), reasonPath) {
			continue
		}
		for w, at := range check(t, pkgs, path).declarations(t) {
			if prev, ok := declared[w]; ok {
				t.Errorf("reason %q declared twice: %s and %s", w, prev, at)
			}
			declared[w] = at
		}
	}
	if len(declared) < 30 {
		t.Fatalf("only %d reasons declared in the module: the walk found too little to be right", len(declared))
	}

	for _, svc := range services {
		t.Run(svc.name, func(t *testing.T) {
			listed := map[string]reason.Reason{}
			for _, r := range svc.reasons {
				listed[r.String()] = r
			}
			var named []string
			for _, rel := range svc.packages {
				c := check(t, pkgs, module+"/"+rel)
				for name, v := range c.referenced() {
					w := wordOf(t, v)
					named = append(named, w)
					if _, ok := declared[w]; !ok {
						t.Errorf("%s: %s (%s) is not declared with reason.New", rel, name, w)
					}
					if svc.doc != "" && !isListed(listed, w) {
						t.Errorf("%s names reason %s (%s), which %s.Reasons() does not list", rel, name, w, svc.name)
					}
					if svc.doc == "" {
						t.Errorf("%s names reason %s, but %s answers no caller", rel, name, svc.name)
					}
				}
				// Every refusal goes through the guard: Verdict.Status,
				// guard.Refuse, guard.WriteRefusal or guard.WriteHTTPError,
				// each of which takes a reason.Reason.
				for _, bare := range slices.Concat(
					c.calls("google.golang.org/grpc/status", "Error", "Errorf", "New", "Newf", "FromProto"),
					c.calls("net/http", "Error")) {
					t.Errorf("%s: a refusal built without a reason (use guard.Refuse or guard.WriteHTTPError)", bare)
				}
			}
			if svc.doc == "" {
				return
			}
			page, err := os.ReadFile(filepath.Join("..", "..", "docs", svc.doc))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range svc.reasons {
				if _, ok := declared[r.String()]; !ok {
					t.Errorf("%s.Reasons() lists %s, which no reason.New declares", svc.name, r)
				}
				if !bytes.Contains(page, []byte("`"+r.String()+"`")) {
					t.Errorf("docs/%s does not document reason `%s` (%s: %s)", svc.doc, r, r.Code(), r.Sentence())
				}
			}
			slices.Sort(named)
			t.Logf("%s can send %d reasons: %s", svc.name, len(svc.reasons), strings.Join(reason.Words(svc.reasons), " "))
			t.Logf("%s's own code names %s", svc.name, strings.Join(slices.Compact(named), " "))
		})
	}
}

// wordOf is the word of the package-level reason variable v, read from
// its declaration's source (export data holds no initialiser).
func wordOf(t *testing.T, v *types.Var) string {
	t.Helper()
	w, ok := wordsByVar[v.Pkg().Path()+"."+v.Name()]
	if !ok {
		t.Fatalf("no declaration found for %s.%s", v.Pkg().Path(), v.Name())
	}
	return w
}

func isListed(listed map[string]reason.Reason, w string) bool {
	_, ok := listed[w]
	return ok
}

// wordsByVar maps "importpath.Name" of every package-level reason
// variable in the module to its word; filled by importsOf's walk of the
// declarations.
var wordsByVar = map[string]string{}

// importsOf parses p's files for their imports and records the words of
// the reason variables p declares (wordsByVar).
func importsOf(t *testing.T, p *listed) []string {
	t.Helper()
	var imports []string
	fset := token.NewFileSet()
	for _, f := range p.GoFiles {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range file.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			imports = append(imports, path)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, v := range vs.Values {
					call, ok := v.(*ast.CallExpr)
					if !ok || len(call.Args) != 3 {
						continue
					}
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
						if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING && i < len(vs.Names) {
							w, _ := strconv.Unquote(lit.Value)
							wordsByVar[p.ImportPath+"."+vs.Names[i].Name] = w
						}
					}
				}
			}
		}
	}
	return imports
}
