package layers_test

import (
	"go/ast"
	"go/types"
	"testing"

	"github.com/callerauth/callerauth/internal/kit/typecheck"
)

// TestNoTypeAssertionOnAnAuthenticator: what a layer of caller
// authentication can do — its audiences, its revocation, the facts it
// never states, a verdict from memory — is stated where the layer is
// built (authn.Layer), never found out by asserting an authenticator's
// type at run time. No package of the module, authn included, asserts or
// type-switches on a value that is an authenticator, nor asserts any
// value to an authenticator's type. (Test files are not type-checked
// here; the source that runs in a service is.)
func TestNoTypeAssertionOnAnAuthenticator(t *testing.T) {
	pkgs, paths := modulePackages(t, 30, func(string) bool { return true })
	checked := 0
	for _, path := range paths {
		c := typecheck.Check(t, pkgs, path)
		for _, f := range c.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				var x ast.Expr
				var to []ast.Expr
				switch n := n.(type) {
				case *ast.TypeAssertExpr:
					if n.Type == nil {
						return true // x.(type): its switch is checked whole
					}
					x, to = n.X, []ast.Expr{n.Type}
				case *ast.TypeSwitchStmt:
					var assert *ast.TypeAssertExpr
					switch s := n.Assign.(type) {
					case *ast.AssignStmt:
						assert, _ = s.Rhs[0].(*ast.TypeAssertExpr)
					case *ast.ExprStmt:
						assert, _ = s.X.(*ast.TypeAssertExpr)
					}
					if assert == nil {
						return true
					}
					x = assert.X
					for _, cl := range n.Body.List {
						to = append(to, cl.(*ast.CaseClause).List...)
					}
				default:
					return true
				}
				checked++
				at := c.Fset.Position(n.Pos())
				if tv, ok := c.Info.Types[x]; ok && isAuthenticator(tv.Type) {
					t.Errorf("%s: a type assertion on %s, an authenticator: state what the layer can do in its authn.Layer instead", at, types.ExprString(x))
				}
				for _, e := range to {
					if tv, ok := c.Info.Types[e]; ok && tv.IsType() && isAuthenticator(tv.Type) {
						t.Errorf("%s: %s asserted to %s, an authenticator's type: hand the layer over as an authn.Layer instead", at, types.ExprString(x), types.ExprString(e))
					}
				}
				return true
			})
		}
	}
	if checked == 0 {
		t.Fatal("no type assertion anywhere in the module: the test must follow the code")
	}
}

// isAuthenticator reports whether t's method set has authn's
// Authenticate(context.Context, string) (*authn.Caller, error).
func isAuthenticator(t types.Type) bool {
	for _, tt := range []types.Type{t, types.NewPointer(t)} {
		if _, isIface := t.Underlying().(*types.Interface); isIface && tt != t {
			continue // a pointer to an interface has no methods
		}
		sel := types.NewMethodSet(tt).Lookup(nil, "Authenticate")
		if sel == nil {
			continue
		}
		sig, ok := sel.Type().(*types.Signature)
		if ok && sig.Params().Len() == 2 && sig.Results().Len() == 2 &&
			types.TypeString(sig.Params().At(0).Type(), nil) == "context.Context" &&
			types.TypeString(sig.Results().At(0).Type(), nil) == "*"+module+"authn.Caller" {
			return true
		}
	}
	return false
}
