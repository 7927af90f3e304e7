// Package bearer reads a bearer credential off a request: an HTTP
// Authorization header or gRPC "authorization" metadata.
//
// Every request yields exactly one of three outcomes, and the difference
// matters downstream: on a node-local socket an [Absent] credential is not a
// violation, while a [Malformed] one is (reason malformed_credentials).
//
//   - Absent: no Authorization at all.
//   - Malformed: the header duplicated, a scheme other than Bearer, an empty
//     token, a token with characters RFC 6750 does not allow, or a token
//     longer than [token.MaxLength].
//   - Token: a well-formed bearer token, returned without the scheme.
//
// The parser never echoes the credential in its explanation.
package bearer

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/callerauth/callerauth/reason"
	"github.com/callerauth/callerauth/token"
)

// Kind is the outcome of reading a credential.
type Kind int

// Outcomes.
const (
	// Absent means no Authorization header or metadata at all.
	Absent Kind = iota
	// Malformed means an Authorization was presented but cannot be used.
	Malformed
	// Token means a well-formed bearer token was presented.
	Token
)

func (k Kind) String() string {
	switch k {
	case Absent:
		return "absent"
	case Malformed:
		return "malformed"
	case Token:
		return "token"
	default:
		return "unknown"
	}
}

// ReasonMalformed is the refusal of a malformed credential.
var ReasonMalformed = reason.New("malformed_credentials", reason.Unauthenticated, "the Authorization header is not exactly one Bearer credential")

// Credential is what a request presented: nothing, something malformed,
// or one bearer token.
//
//	cred := bearer.FromHeader(r.Header) // or FromIncomingContext(ctx) in gRPC
//	switch cred.Kind {
//	case bearer.Absent:    // token_missing, unless the transport pins the caller
//	case bearer.Malformed: // malformed_credentials; cred.Problem says why
//	case bearer.Token:     // cred.Token, for an authn.Authenticator
//	}
type Credential struct {
	Kind Kind
	// Token is set when Kind is Token.
	Token string
	// Problem says why a credential is Malformed, without quoting it.
	Problem string
}

// Parse classifies the values of the Authorization header (or metadata key),
// in the order received.
func Parse(values []string) Credential {
	switch len(values) {
	case 0:
		return Credential{Kind: Absent}
	case 1:
	default:
		return malformed("the Authorization header is duplicated")
	}
	v := values[0]
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok {
		if strings.EqualFold(strings.TrimSpace(v), "bearer") {
			return malformed("the bearer token is empty")
		}
		return malformed("the Authorization header is not \"Bearer <token>\"")
	}
	// The scheme is case-insensitive (RFC 7235 §2.1).
	if !strings.EqualFold(scheme, "bearer") {
		if isToken68(scheme) && len(scheme) <= 32 {
			return malformed("the Authorization scheme is " + scheme + ", not Bearer")
		}
		return malformed("the Authorization scheme is not Bearer")
	}
	tok = strings.TrimLeft(tok, " ")
	switch {
	case tok == "":
		return malformed("the bearer token is empty")
	case len(tok) > token.MaxLength:
		return malformed("the bearer token is longer than 16384 bytes")
	case !isToken68(tok):
		return malformed("the bearer token has characters RFC 6750 does not allow")
	}
	return Credential{Kind: Token, Token: tok}
}

// FromHeader reads the Authorization header of an HTTP request.
func FromHeader(h http.Header) Credential { return Parse(h.Values("Authorization")) }

// FromMetadata reads the "authorization" key of gRPC metadata.
func FromMetadata(md metadata.MD) Credential { return Parse(md.Get("authorization")) }

// FromIncomingContext reads the "authorization" key of a gRPC server
// call's metadata, copying that key's values alone (not the whole
// metadata, as metadata.FromIncomingContext does).
func FromIncomingContext(ctx context.Context) Credential {
	return Parse(metadata.ValueFromIncomingContext(ctx, "authorization"))
}

// token68 marks the bytes of a b64token before its "=" padding: one
// table lookup per byte of a token that is checked on every request.
var token68 = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
	}
	return t
}()

func malformed(why string) Credential { return Credential{Kind: Malformed, Problem: why} }

// isToken68 reports whether s matches RFC 6750's b64token:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	if s == "" {
		return false
	}
	i := 0
	for ; i < len(s) && token68[s[i]]; i++ {
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
