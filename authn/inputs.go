package authn

// Fact is something about a caller only some backends state: a rule that
// reads one (binding.Roles reads the roles; with RequireTenant, the
// tenant) never passes over a backend that never states it.
type Fact string

// Facts a backend may or may not state.
const (
	// FactRoles is Caller.Roles.
	FactRoles Fact = "roles"
	// FactTenant is Caller.Tenant.
	FactTenant Fact = "tenant"
)

// Stating is implemented by an authenticator that can say a fact is one
// it never states: Lacks returns why (naming the backend), or "" when it
// may state it. An authenticator that does not implement it is taken to
// state every fact. Wrappers (the verdict cache, Recheck) answer for what
// they wrap.
type Stating interface {
	Lacks(f Fact) string
}

// Lacks is what auth says of f: "" unless auth is a [Stating] that never
// states it.
func Lacks(auth Authenticator, f Fact) string {
	if s, ok := auth.(Stating); ok {
		return s.Lacks(f)
	}
	return ""
}
