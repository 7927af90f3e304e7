// Package flags_test holds every service's flags to doing something: each
// flag a service registers (pflag's *Var(&x, "name", ...)) is bound to a
// variable or field that its code reads — not only checks — following the
// options straight down: a field copied into the completed config (a
// composite literal's value, an assignment) is followed to that field, and
// a check (a comparison in Validate or Complete, an error message) is not a
// read. The caller-authentication flags that only one backend reads are
// refused at start-up when given with another (callers's
// TestFlagsNeverRead); this test proves the others are read at all.
package flags_test

import (
	"fmt"
	"go/ast"
	"go/types"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/kit/typecheck"
)

const module = "github.com/callerauth/callerauth"

// packages are where the services' flags are registered and read: each
// service, the serving skeleton and the caller-authentication stack.
var packages = []string{
	"internal/services/pdp", "internal/services/connector", "internal/services/vmafx/controller",
	"internal/services/vmafx/node", "internal/services/vmafx/operator", "internal/services/proxy", "internal/serve", "callers",
}

// values are the pflag.Value types a flag may be registered with by
// f.Var instead of a variable, and why each does something.
var values = map[string]string{
	module + "/internal/serve.removed":                   "a removed flag: setting it stops the process saying what replaces it",
	module + "/internal/services/vmafx/operator.zeroOff": "controller-runtime's --metrics-bind-address, an alias writing --metrics-listen's value",
}

// checks are the functions whose comparisons are checks, not reads.
var checks = []string{"Validate", "Complete", "AddFlags", "AddProcessFlags"}

// key names a variable the same way in every package's type-check (a
// field seen through export data is another object than the one checked
// from source): its package, name and declaration's place.
type key string

func keyOf(c *typecheck.Checked, v *types.Var) key {
	if v == nil {
		return ""
	}
	pos := c.Fset.Position(v.Pos())
	pkg := ""
	if v.Pkg() != nil {
		pkg = v.Pkg().Path()
	}
	// The line, not the column: export data's columns differ from the
	// source's.
	return key(fmt.Sprintf("%s.%s@%s:%d", pkg, v.Name(), filepath.Base(pos.Filename), pos.Line))
}

type site struct {
	c    *typecheck.Checked
	fn   string // the enclosing function's name; "" outside one
	path []ast.Node
}

func TestEveryFlagIsRead(t *testing.T) {
	pkgs := typecheck.Load(t, "../../...")
	var checked []*typecheck.Checked
	for _, p := range packages {
		checked = append(checked, typecheck.Check(t, pkgs, module+"/"+p))
	}
	inScope := func(k key) bool {
		pkg, _, _ := strings.Cut(string(k), "@")
		return slices.ContainsFunc(packages, func(p string) bool { return strings.HasPrefix(pkg, module+"/"+p+".") })
	}
	// Every use of every variable, with the path of nodes above it.
	uses := map[key][]site{}
	bools := map[key]bool{}
	for _, c := range checked {
		for _, file := range c.Files {
			var stack []ast.Node
			fn := ""
			ast.Inspect(file, func(n ast.Node) bool {
				if n == nil {
					stack = stack[:len(stack)-1]
					if len(stack) == 1 {
						fn = ""
					}
					return true
				}
				stack = append(stack, n)
				if d, ok := n.(*ast.FuncDecl); ok {
					fn = d.Name.Name
				}
				if id, ok := n.(*ast.Ident); ok {
					if v, ok := c.Info.Uses[id].(*types.Var); ok {
						k := keyOf(c, v)
						uses[k] = append(uses[k], site{c, fn, slices.Clone(stack)})
						if b, ok := v.Type().Underlying().(*types.Basic); ok && b.Kind() == types.Bool {
							bools[k] = true
						}
					}
				}
				return true
			})
		}
	}
	type flag struct {
		name, at string
		v        *types.Var
		k        key
	}
	var flags []flag
	for _, c := range checked {
		c.EachCall(func(call *ast.CallExpr, fn *types.Func) {
			recv := fn.Signature().Recv()
			if recv == nil || !strings.HasSuffix(recv.Type().String(), "github.com/spf13/pflag.FlagSet") || !strings.HasSuffix(fn.Name(), "Var") || len(call.Args) < 2 {
				return
			}
			if fn.Name() == "Var" {
				tn := types.TypeString(c.Info.TypeOf(call.Args[0]), nil)
				if _, ok := values[tn]; !ok {
					t.Errorf("%s: a flag registered with a %s: say in values why it does something, or bind it to a variable", c.Fset.Position(call.Pos()), tn)
				}
				return
			}
			name, err := strconv.Unquote(exprString(call.Args[1]))
			if err != nil {
				t.Errorf("%s: a flag whose name is not a literal", c.Fset.Position(call.Pos()))
				return
			}
			at := fmt.Sprintf("%s: --%s", c.Fset.Position(call.Pos()), name)
			v := target(c, call.Args[0])
			if v == nil {
				t.Errorf("%s: not bound to &variable", at)
				return
			}
			flags = append(flags, flag{name, at, v, keyOf(c, v)})
		})
	}
	if len(flags) < 60 {
		t.Fatalf("only %d flags found: the walk found too little to be right", len(flags))
	}
	var read func(k key, seen map[key]bool) bool
	read = func(k key, seen map[key]bool) bool {
		if seen[k] {
			return false
		}
		seen[k] = true
		for _, s := range uses[k] {
			copied, real := use(s, bools[k])
			ck := keyOf(s.c, copied)
			switch {
			case copied != nil && ck != k && inScope(ck):
				if read(ck, seen) {
					return true
				}
			case copied != nil && ck != k:
				return true // handed to another package's configuration
			case real:
				return true
			}
		}
		return false
	}
	var names []string
	for _, f := range flags {
		if !read(f.k, map[key]bool{}) {
			t.Errorf("%s (bound to %s) is registered and never read", f.at, f.v.Name())
		}
		names = append(names, f.name)
	}
	sort.Strings(names)
	t.Logf("%d flags registered, each read: %s", len(names), strings.Join(slices.Compact(names), " "))
}

// target is the variable arg points to: &x, &o.F, or a conversion of one.
func target(c *typecheck.Checked, arg ast.Expr) *types.Var {
	for {
		switch e := arg.(type) {
		case *ast.CallExpr: // (*string)(&o.Role)
			if len(e.Args) != 1 {
				return nil
			}
			arg = e.Args[0]
		case *ast.ParenExpr:
			arg = e.X
		case *ast.UnaryExpr:
			arg = e.X
		case *ast.SelectorExpr:
			v, _ := c.Info.Uses[e.Sel].(*types.Var)
			return v
		case *ast.Ident:
			v, _ := c.Info.Uses[e].(*types.Var)
			return v
		default:
			return nil
		}
	}
}

// use says what one use of a variable does: copies it into another
// variable (a composite literal's key, an assignment's left side), or
// reads it for real; neither when it is written, registered as a flag, or
// only checked.
//
// A boolean read in a check is a read: it gates what the check allows
// (--insecure-caller-auth-off); a value read in one only validates itself.
func use(s site, boolean bool) (copied *types.Var, real bool) {
	p := s.path
	i := len(p) - 1 // the identifier
	// The expression the use is: o.F rather than F.
	if i > 0 {
		if sel, ok := p[i-1].(*ast.SelectorExpr); ok && sel.Sel == p[i] {
			i--
		}
	}
	e := p[i]
	if i == 0 {
		return nil, false
	}
	switch parent := p[i-1].(type) {
	case *ast.KeyValueExpr:
		if parent.Key == e {
			return nil, false // a field named in a literal: written
		}
		if k, ok := parent.Key.(*ast.Ident); ok {
			v, _ := s.c.Info.Uses[k].(*types.Var)
			return v, v == nil
		}
		return nil, true
	case *ast.AssignStmt:
		for j, l := range parent.Lhs {
			if l == e {
				return nil, false // written
			}
			if j < len(parent.Rhs) && parent.Rhs[j] == e && len(parent.Lhs) == len(parent.Rhs) {
				return target(s.c, parent.Lhs[j]), false
			}
		}
		return nil, true
	case *ast.UnaryExpr:
		if parent.Op.String() == "&" {
			if call, ok := p[i-2].(*ast.CallExpr); ok && isFlagCall(s.c, call) {
				return nil, false // the registration
			}
		}
	case *ast.CallExpr:
		if isFlagCall(s.c, parent) || isMessage(s.c, parent) {
			return nil, false
		}
		return nil, true
	}
	// Anything else — a comparison, a condition, an operand — is a read
	// outside the checking functions and a check inside them.
	return nil, s.fn != "" && (boolean || !slices.Contains(checks, s.fn))
}

func isFlagCall(c *typecheck.Checked, call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	fn, ok := c.Info.Uses[sel.Sel].(*types.Func)
	return ok && fn.Signature().Recv() != nil && strings.HasSuffix(fn.Signature().Recv().Type().String(), "pflag.FlagSet")
}

// isMessage says whether call only formats a message: fmt's and errors'
// functions, or a local closure (an error collector).
func isMessage(c *typecheck.Checked, call *ast.CallExpr) bool {
	switch f := call.Fun.(type) {
	case *ast.SelectorExpr:
		if fn, ok := c.Info.Uses[f.Sel].(*types.Func); ok && fn.Pkg() != nil {
			return fn.Pkg().Path() == "fmt" || fn.Pkg().Path() == "errors"
		}
	case *ast.Ident:
		_, isVar := c.Info.Uses[f].(*types.Var)
		return isVar || f.Name == "append"
	}
	return false
}

func exprString(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok {
		return b.Value
	}
	return ""
}

// onlyOn are the callers.Options fields one backend alone reads, and why
// the other has nothing to read them with. Any other field backend()
// reads must be read on every branch: a service's setting (its
// --caller-audience, above all) holds whatever --caller-backend says.
var onlyOn = map[string]string{
	"WatchNode":            "tokenreview: narrows --caller-watch-bound-objects' pod watch, which only the TokenReview backend runs (the flag is refused under oidc)",
	"CheckIssuers":         "oidc: the service's requirement of an AuthenticationConfiguration's issuers; TokenReview reads no file of issuers",
	"AuthenticationConfig": "oidc: the file of issuers; Complete refuses it under tokenreview",
	"Kubeconfig":           "tokenreview: the API server that reviews; Complete refuses it under oidc",
	"Issuers":              "tokenreview: the API server's issuers; Complete refuses them under oidc (its issuers are in the file)",
	"ReviewQPS":            "tokenreview: TokenReviews sent; refused under oidc as a flag that does nothing",
	"ReviewBurst":          "tokenreview: TokenReviews sent; refused under oidc as a flag that does nothing",
	"ReviewInterval":       "tokenreview: a TokenReview per interval; Complete refuses it under oidc",
	"WatchBoundObjects":    "tokenreview: the API server's objects; Complete refuses it under oidc",
	"WatchMaxBreak":        "tokenreview: the bound-object watch's; refused under oidc as a flag that does nothing",
	"CacheMaxEntries":      "tokenreview: sizes Recheck's reviews beside the verdict cache (which New sizes on every backend)",
}

// TestSettingsHoldOnEveryBackend: every field of callers.Options that
// picks or shapes the backend is read in each backend's branch of
// built.backend (the AuthenticationConfiguration's and TokenReview's), or
// is listed in onlyOn with the reason. The settings New reads outside it
// (the mode, fail-open, the cache) hold on every backend by construction.
// This is the class the audience once escaped: read by TokenReview alone,
// never under oidc.
func TestSettingsHoldOnEveryBackend(t *testing.T) {
	pkgs := typecheck.Load(t, "../../callers")
	c := typecheck.Check(t, pkgs, module+"/callers")
	var backend *ast.FuncDecl
	for _, f := range c.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "backend" && fd.Recv != nil {
				backend = fd
			}
		}
	}
	if backend == nil {
		t.Fatal("callers has no built.backend: the test must follow the code")
	}
	// The oidc branch: the if whose condition names BackendOIDC; the
	// TokenReview branch: everything after it.
	var oidcBranch ast.Node
	var rest []ast.Stmt
	for i, st := range backend.Body.List {
		if is, ok := st.(*ast.IfStmt); ok && names(is.Cond, "BackendOIDC") {
			oidcBranch, rest = is.Body, backend.Body.List[i+1:]
			break
		}
	}
	if oidcBranch == nil || len(rest) == 0 {
		t.Fatal("built.backend has no `if o.Backend == BackendOIDC` branch followed by TokenReview's: the test must follow the code")
	}
	reads := func(nodes ...ast.Node) map[string]bool {
		got := map[string]bool{}
		for _, n := range nodes {
			ast.Inspect(n, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "o" {
						got[sel.Sel.Name] = true
					}
				}
				return true
			})
		}
		return got
	}
	restNodes := make([]ast.Node, len(rest))
	for i, st := range rest {
		restNodes[i] = st
	}
	onOIDC, onReview := reads(oidcBranch), reads(restNodes...)
	all := map[string]bool{}
	for f := range onOIDC {
		all[f] = true
	}
	for f := range onReview {
		all[f] = true
	}
	if !all["Audience"] {
		t.Fatal("built.backend reads no o.Audience: the test must follow the code")
	}
	for f := range all {
		if onOIDC[f] && onReview[f] {
			continue
		}
		if why, ok := onlyOn[f]; ok {
			only := map[bool]string{true: "oidc", false: "tokenreview"}[onOIDC[f]]
			if !strings.HasPrefix(why, only+":") {
				t.Errorf("Options.%s is read on %s alone, but onlyOn says %q", f, only, why)
			}
			continue
		}
		t.Errorf("Options.%s is read on one backend only (oidc %v, tokenreview %v): read it on both, or refuse it where it cannot hold and list it in onlyOn with the reason", f, onOIDC[f], onReview[f])
	}
}

// names reports whether e mentions the identifier name.
func names(e ast.Expr, name string) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == name {
			found = true
		}
		return !found
	})
	return found
}
