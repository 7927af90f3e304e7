package pdp

import (
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/reason"
)

// The pdp's own refusals (after the guard's: the authentication failures
// and the system binding's), each in the JSON error body
// {"reason", "error"} with its HTTP status (docs/pdp.md). A decision's
// own reason (no_policy_matched, a policy's @reason, ...) is not a
// refusal: it is the record's, with HTTP 200.
var (
	ReasonAPINotServed    = reason.New("api_not_served", reason.NotFound, "this PDP's policy package does not serve this API")
	ReasonNoPDPIdentifier = reason.New("no_pdp_identifier", reason.NotFound, "the metadata path names no PDP identifier")
	ReasonUnknownTenant   = reason.New("unknown_tenant", reason.NotFound, "this PDP has no metadata for that tenant")
	ReasonRecordFailed    = reason.New("record_failed", reason.Internal, "the decision record could not be built")
	ReasonSigningFailed   = reason.New("signing_failed", reason.Internal, "the decision record could not be signed")
	ReasonEncodingFailed  = reason.New("encoding_failed", reason.Internal, "the answer could not be encoded")
)

// ReasonCallerAuthOff is the record's caller reason when caller
// authentication is off (--caller-auth-mode off): no caller was asked
// for, so the record names none. It is never a refusal.
var ReasonCallerAuthOff = reason.New("caller_auth_off", reason.Unauthenticated, "caller authentication is off: the record names no caller")

// Reasons are every reason the pdp can send, in a refusal or in a
// record's caller block: the authentication failures, the system
// binding's, a request it could not read, and its own. docs/pdp.md lists
// each; test/reasons holds the code to this list.
func Reasons() []reason.Reason {
	return reason.Union(binding.Reasons(binding.SystemBinding(nil)), append([]reason.Reason{guard.ReasonBadRequest,
		ReasonAPINotServed, ReasonNoPDPIdentifier, ReasonUnknownTenant, ReasonRecordFailed, ReasonSigningFailed, ReasonEncodingFailed,
		ReasonCallerAuthOff}, decisionlog.Reasons()...)...)
}
