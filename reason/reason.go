// Package reason says why callerauth refuses a request. A [Reason] is a
// value — a stable word, a [Code] that says how the refusal travels, and a
// sentence a person reads — declared once, as a package-level variable, by
// the package that owns the refusal:
//
//	var JobNotFound = reason.New("job_not_found", reason.NotFound, "no such job in your tenant")
//
// The word is the metric label, the log field and the detail the caller
// sees (the gRPC ErrorInfo reason, the "reason" member of an HTTP error
// body). There is no table to register in and nothing global: whoever
// refuses holds the value, so its code and sentence travel with it, and
// the compiler sees every place a reason is used.
//
// This package is the ground floor of the library: it imports nothing of
// callerauth, and every other package may declare reasons with it.
package reason

import "fmt"

// Code is the class of a refusal; the guard maps it to a gRPC code and an
// HTTP status (guard.GRPCCode, guard.HTTPStatus).
type Code int

// Refusal codes.
const (
	// Unauthenticated: no usable credential (gRPC Unauthenticated, HTTP 401).
	Unauthenticated Code = iota + 1
	// PermissionDenied: a valid identity that may not say this (gRPC
	// PermissionDenied, HTTP 403).
	PermissionDenied
	// Unavailable: the answer depends on a validator (or a store) that did
	// not give one; retry later (gRPC Unavailable, HTTP 503).
	Unavailable
	// InvalidArgument: the request cannot be read or breaks a limit
	// (gRPC InvalidArgument, HTTP 400).
	InvalidArgument
	// NotFound: what the request names does not exist for this caller
	// (gRPC NotFound, HTTP 404).
	NotFound
	// FailedPrecondition: the request does not fit the state of what it
	// names (gRPC FailedPrecondition, HTTP 409).
	FailedPrecondition
	// ResourceExhausted: the caller (or its tenant) has used up a quota;
	// retry later (gRPC ResourceExhausted, HTTP 429).
	ResourceExhausted
	// Internal: the service failed to build its answer (gRPC Internal,
	// HTTP 500); nothing about the caller.
	Internal
)

var codeNames = [...]string{"OK", "Unauthenticated", "PermissionDenied", "Unavailable", "InvalidArgument", "NotFound", "FailedPrecondition", "ResourceExhausted", "Internal"}

func (c Code) String() string {
	if c < 0 || int(c) >= len(codeNames) {
		return fmt.Sprintf("Code(%d)", int(c))
	}
	return codeNames[c]
}

// Reason is one stable refusal. The zero Reason is "no reason" (an allowed
// request); every other one is made by [New]. Reasons compare with ==:
// two are equal when word, code and sentence are.
//
//	var ReasonQuotaExceeded = reason.New("quota_exceeded", reason.ResourceExhausted,
//		"the caller's tenant is over its quota") // declared once, by the package that refuses
//	ReasonQuotaExceeded.String() // "quota_exceeded": the metric label, the log field, what the caller sees
type Reason struct {
	word     string
	code     Code
	sentence string
}

// MaxWordBytes is the longest word a reason may have.
const MaxWordBytes = 64

// New declares a reason: word is a stable word (a lower-case letter, then
// a-z, 0-9 or '_', at most [MaxWordBytes] bytes), code how it travels, and
// sentence what a person reads. Call it once, in a package-level variable:
// anything else panics, as regexp.MustCompile does, since a malformed
// reason is a programming error.
func New(word string, code Code, sentence string) Reason {
	if !validWord(word) || code < Unauthenticated || code > Internal || sentence == "" {
		panic(fmt.Sprintf("reason.New(%q, %v, %q): want a stable word (a-z, 0-9, '_', starting with a letter, at most %d bytes), a code and a sentence", word, code, sentence, MaxWordBytes))
	}
	return Reason{word: word, code: code, sentence: sentence}
}

func validWord(w string) bool {
	if w == "" || len(w) > MaxWordBytes || w[0] < 'a' || w[0] > 'z' {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// String is the reason's word ("" for the zero Reason).
func (r Reason) String() string { return r.word }

// Code is how the refusal travels (0 for the zero Reason).
func (r Reason) Code() Code { return r.code }

// Sentence is what a person reads in a response body.
func (r Reason) Sentence() string { return r.sentence }

// IsZero reports whether r is the zero Reason: no refusal.
func (r Reason) IsZero() bool { return r == Reason{} }

// Words are the words of rs, in order: the label values a metric starts
// at zero for.
func Words(rs []Reason) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.word
	}
	return out
}

// Union is rs and then each reason of more not yet among them, in order.
// Two different reasons with one word are a programming error (one word
// would be answered two ways) and panic.
func Union(rs []Reason, more ...Reason) []Reason {
	out := append([]Reason(nil), rs...)
next:
	for _, m := range more {
		for _, r := range out {
			if r.word == m.word {
				if r != m {
					panic(fmt.Sprintf("reason: %q declared twice: %v %q and %v %q", m.word, r.code, r.sentence, m.code, m.sentence))
				}
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}
