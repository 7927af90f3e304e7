package binding

import (
	"errors"
	"fmt"
	"strings"

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

// ParseSystemBindings reads SYSTEM=PRINCIPAL values (flag names them in
// errors): the table [SystemBinding] takes. A principal in the
// service-account form must be a well-formed one (it is compared by exact
// string with what TokenReview returns); any other principal is allowed,
// since a TokenReview backed by another authenticator can return other
// usernames, but comes back in warnings: a ServiceAccount token never
// matches it. A system bound twice is refused.
func ParseSystemBindings(flag string, values []string) (map[string]string, []string, error) {
	bindings := map[string]string{}
	var errs []error
	var warnings []string
	for _, b := range values {
		sys, principal, ok := strings.Cut(b, "=")
		if !ok || sys == "" || principal == "" || strings.TrimSpace(b) != b {
			errs = append(errs, fmt.Errorf("%s %q: want SYSTEM=PRINCIPAL", flag, b))
			continue
		}
		if _, dup := bindings[sys]; dup {
			errs = append(errs, fmt.Errorf("%s: system %q is bound twice", flag, sys))
		}
		bindings[sys] = principal
		if strings.HasPrefix(principal, ServiceAccountPrefix) {
			if err := ValidateServiceAccountUsername(principal); err != nil {
				errs = append(errs, fmt.Errorf("%s %q: principal %q: %w", flag, b, principal, err))
			}
		} else {
			warnings = append(warnings, fmt.Sprintf("%s %q: principal %q is not a service-account username (%s<namespace>:<name>); a ServiceAccount token will never match it", flag, b, principal, ServiceAccountPrefix))
		}
	}
	return bindings, warnings, errors.Join(errs...)
}
