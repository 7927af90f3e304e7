package binding

import (
	"fmt"
	"path"
	"slices"

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
}

// Roles is the method → role rule: every call is authenticated and role-checked,
// and the caller's tenant scopes what it may read.
func Roles(cfg RoleConfig) Rule {
	req := make(map[string]string, len(cfg.Required))
	for k, v := range cfg.Required {
		req[k] = v
	}
	return Deny([]reason.Reason{ReasonTokenMissing, ReasonRoleMissing, ReasonTenantMissing}, func(s Subject, r Request) *Violation {
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
		case !slices.Contains(c.Roles, role):
			return &Violation{Reason: ReasonRoleMissing, Metadata: map[string]string{"required_role": role},
				Detail: fmt.Sprintf("%s lacks role %q needed for %s", c.Username, role, r.Method)}
		case cfg.RequireTenant && c.Tenant == "":
			return &Violation{Reason: ReasonTenantMissing,
				Detail: fmt.Sprintf("%s states no tenant; reads could not be scoped", c.Username)}
		}
		return nil
	})
}
