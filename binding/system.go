package binding

import (
	"fmt"

	"github.com/callerauth/callerauth/reason"
)

// ReasonPrincipalCannotRepresentSystem is the system binding's refusal of a verified
// caller whose principal is not the one bound to the system it names.
var ReasonPrincipalCannotRepresentSystem = reason.New("principal_cannot_represent_system", reason.PermissionDenied, "principal cannot represent system")

// SystemBinding is the caller→system binding the pdp enforces (docs/pdp.md): the request's system
// must be in the table, and the caller's username must equal the principal
// bound to it, by exact string. Anything else is refused
// (PermissionDenied, HTTP 403).
func SystemBinding(table map[string]string) Rule {
	t := make(map[string]string, len(table))
	for k, v := range table {
		t[k] = v
	}
	return Deny([]reason.Reason{ReasonTokenMissing, ReasonPrincipalCannotRepresentSystem}, func(s Subject, r Request) *Violation {
		if s.Degraded {
			return degraded(s)
		}
		if s.Caller == nil {
			return &Violation{Reason: ReasonTokenMissing, Detail: "no token"}
		}
		principal, ok := t[r.System]
		switch {
		case !ok:
			return &Violation{Reason: ReasonPrincipalCannotRepresentSystem,
				Detail: fmt.Sprintf("no principal is bound to system %q; %s may not represent it", r.System, s.Caller.Username)}
		case principal != s.Caller.Username:
			return &Violation{Reason: ReasonPrincipalCannotRepresentSystem,
				Detail: fmt.Sprintf("%s cannot represent system %q (bound to %s)", s.Caller.Username, r.System, principal)}
		}
		return nil
	})
}
