package binding

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/reason"
)

// Role and tenant reasons ([Roles]).
var (
	ReasonRoleMissing   = reason.New("role_missing", reason.PermissionDenied, "the caller lacks the role this method requires")
	ReasonTenantMissing = reason.New("tenant_missing", reason.PermissionDenied, "the caller's token states no tenant")
)

// RoleConfig configures [Roles].
type RoleConfig struct {
	// Required maps a method to the role it needs, e.g. "GetJob" →
	// "vmafx:reader". A full gRPC method name ("/pkg.Service/GetJob") is
	// looked up by its full name first, then by its last element. A method
	// not in the table is refused: every call is role-checked.
	Required map[string]string
	// RequireTenant refuses a caller whose issuer states no tenant, so that
	// handlers can scope every read to the caller's tenant.
	RequireTenant bool
	// Grants give roles to callers by what every backend states — their
	// username, groups, service account or extra values — beside the
	// roles the caller's issuer states (Caller.Roles). TokenReview states
	// no roles: over it, Grants are where roles come from, and a rule
	// without any is refused when the guard is built.
	Grants []RoleGrant
}

// RoleGrant gives Role to every caller it names: one whose username is in
// Usernames, one in any of Groups, the service account "namespace:name"
// (or every account of a namespace, "namespace:*") in ServiceAccounts, or
// one with any of the values of a key of Extra.
type RoleGrant struct {
	Role            string
	Usernames       []string
	Groups          []string
	ServiceAccounts []string
	Extra           map[string][]string
}

// Names reports whether g names the caller: by username, group, service
// account or extra value.
func (g RoleGrant) Names(c *authn.Caller) bool {
	if slices.Contains(g.Usernames, c.Username) || slices.ContainsFunc(c.Groups, func(gr string) bool { return slices.Contains(g.Groups, gr) }) {
		return true
	}
	if ns, name, ok := authn.ServiceAccountOf(c.Username); ok && (slices.Contains(g.ServiceAccounts, ns+":"+name) || slices.Contains(g.ServiceAccounts, ns+":*")) {
		return true
	}
	for k, vs := range g.Extra {
		if slices.ContainsFunc(c.Extra[k], func(v string) bool { return slices.Contains(vs, v) }) {
			return true
		}
	}
	return false
}

// Validate refuses a configuration that cannot be honoured: a grant with
// no role, or naming nobody, or a service account not "namespace:name".
func (cfg RoleConfig) Validate() error {
	var errs []error
	for i, g := range cfg.Grants {
		if g.Role == "" {
			errs = append(errs, fmt.Errorf("binding: Grants[%d] gives no role", i))
		}
		if len(g.Usernames)+len(g.Groups)+len(g.ServiceAccounts)+len(g.Extra) == 0 {
			errs = append(errs, fmt.Errorf("binding: Grants[%d] (%s) names no caller", i, g.Role))
		}
		for _, sa := range g.ServiceAccounts {
			if ns, name, ok := strings.Cut(sa, ":"); !ok || ns == "" || name == "" || strings.Contains(name, ":") {
				errs = append(errs, fmt.Errorf("binding: Grants[%d] (%s): service account %q: want namespace:name or namespace:*", i, g.Role, sa))
			}
		}
	}
	return errors.Join(errs...)
}

// Roles is the method → role rule: every call is authenticated and role-checked,
// and the caller's tenant scopes what it may read.
//
// It needs the caller's roles from its backend unless Grants give them,
// and its tenant with RequireTenant ([Needing]): a guard over a backend
// that never states one (TokenReview states no roles) is refused when it
// is built, naming both.
func Roles(cfg RoleConfig) Rule {
	req := make(map[string]string, len(cfg.Required))
	for k, v := range cfg.Required {
		req[k] = v
	}
	grants := slices.Clone(cfg.Grants)
	var needs []Need
	if len(grants) == 0 {
		needs = append(needs, Need{authn.FactRoles, "binding.Roles checks the caller's roles, and RoleConfig.Grants gives none"})
	}
	if cfg.RequireTenant {
		needs = append(needs, Need{authn.FactTenant, "binding.Roles with RequireTenant checks the caller's tenant"})
	}
	return needing{Deny([]reason.Reason{ReasonTokenMissing, ReasonRoleMissing, ReasonTenantMissing}, func(s Subject, r Request) *Violation {
		if s.Degraded {
			return degraded(s)
		}
		c := s.Caller
		if c == nil {
			return &Violation{Reason: ReasonTokenMissing, Detail: "no token"}
		}
		role, ok := req[r.Method]
		if !ok {
			role, ok = req[path.Base(r.Method)]
		}
		switch {
		case !ok:
			return &Violation{Reason: ReasonRoleMissing,
				Detail: fmt.Sprintf("no role grants method %q", r.Method)}
		case !slices.Contains(c.Roles, role) && !slices.ContainsFunc(grants, func(g RoleGrant) bool { return g.Role == role && g.Names(c) }):
			return &Violation{Reason: ReasonRoleMissing, Metadata: map[string]string{"required_role": role},
				Detail: fmt.Sprintf("%s lacks role %q needed for %s", c.Username, role, r.Method)}
		case cfg.RequireTenant && c.Tenant == "":
			return &Violation{Reason: ReasonTenantMissing,
				Detail: fmt.Sprintf("%s states no tenant; reads could not be scoped", c.Username)}
		}
		return nil
	}), needs, cfg.Validate()}
}
