package layers_test

import (
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/kit/typecheck"
)

// modulePackages loads the module's packages with Go source and returns
// them with the sorted import paths of those keep takes (by path inside
// the module); fewer than least fails the test, which must follow the
// code.
func modulePackages(t *testing.T, least int, keep func(rel string) bool) (map[string]*typecheck.Package, []string) {
	t.Helper()
	pkgs := typecheck.Load(t, "../../...")
	var paths []string
	for path, p := range pkgs {
		if !p.Standard && strings.HasPrefix(path, module) && len(p.GoFiles) > 0 && keep(strings.TrimPrefix(path, module)) {
			paths = append(paths, path)
		}
	}
	slices.Sort(paths)
	if len(paths) < least {
		t.Fatalf("only %d packages taken", len(paths))
	}
	return pkgs, paths
}

// TestNoInternalTypeInPublicSignatures: what another module can call in
// the library names no type it could not import — no package under
// internal/ in an exported function's or method's signature, an exported
// type's definition or fields, or an exported variable's type.
func TestNoInternalTypeInPublicSignatures(t *testing.T) {
	pkgs, paths := modulePackages(t, 10, func(rel string) bool {
		top, _, _ := strings.Cut(rel, "/")
		return !slices.Contains([]string{"internal", "cmd", "test", "examples", "tools"}, top)
	})
	for _, path := range paths {
		c := typecheck.Check(t, pkgs, path)
		scope := c.Types.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			where := strings.TrimPrefix(path, module) + "." + name
			check := func(what string, tp types.Type) {
				if bad := internalIn(tp, map[types.Type]bool{}); bad != "" {
					t.Errorf("%s%s names %s, which another module cannot import", where, what, bad)
				}
			}
			switch o := obj.(type) {
			case *types.TypeName:
				n, ok := o.Type().(*types.Named)
				if !ok {
					continue
				}
				if st, ok := n.Underlying().(*types.Struct); ok {
					for i := range st.NumFields() {
						if f := st.Field(i); f.Exported() {
							check("."+f.Name(), f.Type())
						}
					}
				} else {
					check("", n.Underlying())
				}
				for i := range n.NumMethods() {
					if m := n.Method(i); m.Exported() {
						check("."+m.Name(), m.Type())
					}
				}
			case *types.Func, *types.Var, *types.Const:
				check("", o.Type())
			}
		}
	}
}

// internalIn is the first type under internal/ that tp names, or "".
func internalIn(tp types.Type, seen map[types.Type]bool) string {
	if seen[tp] {
		return ""
	}
	seen[tp] = true
	switch x := tp.(type) {
	case *types.Named:
		if p := x.Obj().Pkg(); p != nil && (strings.Contains(p.Path(), "/internal/") || strings.HasSuffix(p.Path(), "/internal")) {
			return p.Path() + "." + x.Obj().Name()
		}
		for i := range x.TypeArgs().Len() {
			if s := internalIn(x.TypeArgs().At(i), seen); s != "" {
				return s
			}
		}
		return "" // its own definition is checked where it is declared
	case *types.Pointer:
		return internalIn(x.Elem(), seen)
	case *types.Slice:
		return internalIn(x.Elem(), seen)
	case *types.Array:
		return internalIn(x.Elem(), seen)
	case *types.Map:
		if s := internalIn(x.Key(), seen); s != "" {
			return s
		}
		return internalIn(x.Elem(), seen)
	case *types.Chan:
		return internalIn(x.Elem(), seen)
	case *types.Signature:
		for _, tup := range []*types.Tuple{x.Params(), x.Results()} {
			for i := range tup.Len() {
				if s := internalIn(tup.At(i).Type(), seen); s != "" {
					return s
				}
			}
		}
	case *types.Struct:
		for i := range x.NumFields() {
			if f := x.Field(i); f.Exported() {
				if s := internalIn(f.Type(), seen); s != "" {
					return s
				}
			}
		}
	case *types.Interface:
		for i := range x.NumMethods() {
			if s := internalIn(x.Method(i).Type(), seen); s != "" {
				return s
			}
		}
	}
	return ""
}
