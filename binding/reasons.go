package binding

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
)

// ReasonInfo is what a stable reason means: how its refusal travels (the
// guard maps Code to a gRPC code and an HTTP status) and the sentence a
// person reads in a response body.
type ReasonInfo struct {
	Code     Code
	Sentence string
}

// reasons is the one table of the refusals callerauth gives: the
// authentication failures every service can answer, each rule's, and the
// services' own ([Define]).
var (
	reasonsMu sync.RWMutex
	reasons   = map[string]ReasonInfo{
		ReasonTokenMissing:                   {Unauthenticated, "no bearer token: send Authorization: Bearer <token>"},
		bearer.ReasonMalformed:               {Unauthenticated, "the Authorization header is not exactly one Bearer credential"},
		string(authn.TokenInvalid):           {Unauthenticated, "the token was not accepted (signature, audience, expiry or issuer)"},
		string(authn.ValidatorUnavailable):   {Unavailable, "the token validator is unavailable; retry"},
		string(authn.ValidatorTimeout):       {Unavailable, "the token validator did not answer in time; retry"},
		string(authn.ValidatorError):         {Unavailable, "the token validator gave no identity; retry later"},
		ReasonPrincipalCannotRepresentSystem: {PermissionDenied, "principal cannot represent system"},
		ReasonRoleMissing:                    {PermissionDenied, "the caller lacks the role this method requires"},
		ReasonTenantMissing:                  {PermissionDenied, "the caller's token states no tenant"},
		ReasonNodeMismatch:                   {PermissionDenied, "the caller may not report on that node"},
		ReasonNodeClaimMismatch:              {PermissionDenied, "the token is bound to a pod on another node"},
		ReasonUnboundCrossNodeToken:          {PermissionDenied, "a cross-node caller's token must be bound to a pod"},
		ReasonCrossNodeClaimAbsent:           {PermissionDenied, "a cross-node caller's token names no node"},
		ReasonUnboundToken:                   {PermissionDenied, "the token is bound to no pod"},
		ReasonNodeClaimAbsent:                {PermissionDenied, "the token names no node"},
		ReasonMissingNodeName:                {PermissionDenied, "an event names no node and there is none to stamp"},
	}
)

var reasonWord = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// Define adds a service's own refusal to the table — its code and
// sentence — and returns the reason, so that a service declares it once:
//
//	var ReasonJobNotFound = binding.Define("job_not_found", binding.NotFound, "no such job in your tenant")
//
// A reason is a stable word (a-z, 0-9, '_', at most 64 bytes). Defining a
// reason again with another meaning panics: two services, or a service and
// a rule, would be answering one reason two ways.
func Define(reason string, code Code, sentence string) string {
	if !reasonWord.MatchString(reason) || code < Unauthenticated || code > ResourceExhausted || sentence == "" {
		panic(fmt.Sprintf("binding: Define(%q, %v, %q): want a stable word, a code and a sentence", reason, code, sentence))
	}
	reasonsMu.Lock()
	defer reasonsMu.Unlock()
	info := ReasonInfo{code, sentence}
	if old, ok := reasons[reason]; ok && old != info {
		panic(fmt.Sprintf("binding: reason %q defined twice: %v %q, then %v %q", reason, old.Code, old.Sentence, code, sentence))
	}
	reasons[reason] = info
	return reason
}

// Describe says what reason means; a reason outside the table (a service's
// own) reads as its words with spaces, PermissionDenied.
func Describe(reason string) ReasonInfo {
	reasonsMu.RLock()
	r, ok := reasons[reason]
	reasonsMu.RUnlock()
	if ok {
		return r
	}
	return ReasonInfo{PermissionDenied, strings.ReplaceAll(reason, "_", " ")}
}

// Known says whether reason is in the table.
func Known(reason string) bool {
	reasonsMu.RLock()
	defer reasonsMu.RUnlock()
	_, ok := reasons[reason]
	return ok
}

// AuthenticationReasons are the refusals a request meets before any rule:
// no token, a malformed header, a refused token, a validator that gave no
// answer.
var AuthenticationReasons = []string{
	ReasonTokenMissing, bearer.ReasonMalformed, string(authn.TokenInvalid),
	string(authn.ValidatorUnavailable), string(authn.ValidatorTimeout), string(authn.ValidatorError),
}

// Reasons are every reason a service guarded by rule can give — the
// authentication failures and the rule's own — so that its violations
// counter starts at zero for each.
func Reasons(rule Rule) []string {
	out := slices.Clone(AuthenticationReasons)
	for _, r := range rule.Reasons() {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}
