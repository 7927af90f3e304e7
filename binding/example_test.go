package binding_test

import (
	"fmt"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
)

// The caller→system binding: each system has the one principal that may
// speak for it. A rule says what it allows and every reason it refuses
// with.
func ExampleSystemBinding() {
	rule := binding.SystemBinding(map[string]string{"secrets-engine": "system:serviceaccount:secrets-engine:secrets-engine"})
	engine := binding.Subject{Caller: &authn.Caller{Username: "system:serviceaccount:secrets-engine:secrets-engine"}}
	other := binding.Subject{Caller: &authn.Caller{Username: "system:serviceaccount:team-a:builder"}}
	for _, c := range []struct {
		who binding.Subject
		sys string
	}{{engine, "secrets-engine"}, {other, "secrets-engine"}, {engine, "billing"}} {
		if _, v := rule.Check(c.who, binding.Request{System: c.sys}); v != nil {
			fmt.Println(c.who.Caller.Username, "→", c.sys, "refused:", v.Reason, v.Reason.Code())
		} else {
			fmt.Println(c.who.Caller.Username, "→", c.sys, "allowed")
		}
	}
	// Output:
	// system:serviceaccount:secrets-engine:secrets-engine → secrets-engine allowed
	// system:serviceaccount:team-a:builder → secrets-engine refused: principal_cannot_represent_system PermissionDenied
	// system:serviceaccount:secrets-engine:secrets-engine → billing refused: principal_cannot_represent_system PermissionDenied
}
