package binding

import (
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/reason"
)

// AuthenticationReasons are the refusals a request meets before any rule:
// no token, a malformed header, a refused token, a validator that gave no
// answer.
func AuthenticationReasons() []reason.Reason {
	return append([]reason.Reason{ReasonTokenMissing, bearer.ReasonMalformed}, authn.Reasons()...)
}

// Reasons are every reason a service guarded by rule can give — the
// authentication failures and the rule's own — so that its violations
// counter starts at zero for each. Two different reasons with one word
// panic ([reason.Union]): one word would be answered two ways.
func Reasons(rule Rule) []reason.Reason {
	return reason.Union(AuthenticationReasons(), rule.Reasons()...)
}
