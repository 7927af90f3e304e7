// Package authn answers "who is calling": an [Authenticator] turns a bearer
// token into a [Caller], or fails with exactly one of five classes, each a
// stable [reason.Reason]:
//
//   - token_invalid: a verdict against the credential (bad signature,
//     expired, not yet valid, wrong audience, unknown issuer, malformed JWT).
//   - validator_unavailable: the validator could not be reached.
//   - validator_timeout: the validator did not answer in time.
//   - validator_error: the validator answered but gave no usable identity
//     (for example, it is forbidden to create TokenReviews).
//
// Only validator_unavailable and validator_timeout say nothing about the
// caller; fail-open decisions hinge on that difference.
//
// Backends live in subpackages: authn/kube (TokenReview) and authn/oidc
// (offline verification against issuers' JWKS). [NewCache] wraps any backend
// with a bounded, HMAC-keyed verdict cache.
package authn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/callerauth/callerauth/reason"
)

// Caller is a verified identity. Treat it as immutable: a cache may hand the
// same *Caller to many requests.
type Caller struct {
	// Username, e.g. system:serviceaccount:<namespace>:<name>.
	Username string
	// UID of the identity (the service account's UID for Kubernetes tokens).
	UID string
	// Groups the identity belongs to.
	Groups []string
	// Audiences the token was accepted for: the intersection of the token's
	// audiences and the ones the authenticator requires.
	Audiences []string
	// PodName, PodUID, NodeName and NodeUID are set when the token is bound
	// to a pod, and to the node that pod was scheduled on (or, for a
	// node-bound token, to a node).
	PodName, PodUID   string
	NodeName, NodeUID string
	// CredentialID identifies the credential, e.g. "JTI=<jti>".
	CredentialID string
	// Tenant and Roles, when the issuer states them.
	Tenant string
	Roles  []string
	// Extra is what else the authenticator says of the identity, by key
	// (an AuthenticationConfiguration's extra mappings; the credential ID
	// under authentication.kubernetes.io/credential-id).
	Extra map[string][]string
	// Issuer is the token's iss.
	Issuer string
	// IssuedAt and Expiry are the token's iat and exp.
	IssuedAt, Expiry time.Time
}

// Authenticator verifies bearer tokens. The backends are authn/kube
// (TokenReview) and authn/oidc (offline, against the issuers' keys); any
// function is one with [AuthenticatorFunc]. Put one behind a [Cache]
// before a guard:
//
//	review, err := kube.New(kube.Config{Audiences: []string{"my-service"}})
//	auth := authn.NewCache(review, authn.CacheConfig{}) // verdicts kept 2 min
//	caller, err := auth.Authenticate(ctx, token)
//	if err != nil {
//		why := authn.ReasonOf(err) // token_invalid, validator_unavailable, ...
//	}
//
// Authenticate is called concurrently from many goroutines. It returns a
// non-nil Caller, or an error for which [ReasonOf] gives the class. It must
// never log or return the token, in whole or in part.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (*Caller, error)
}

// AuthenticatorFunc adapts a function to [Authenticator].
type AuthenticatorFunc func(ctx context.Context, token string) (*Caller, error)

// Authenticate calls f(ctx, token).
func (f AuthenticatorFunc) Authenticate(ctx context.Context, token string) (*Caller, error) {
	return f(ctx, token)
}

var _ Authenticator = AuthenticatorFunc(nil)

// The five failure classes, each a [reason.Reason]: the same word is the
// metric label, the log field and the error detail.
var (
	TokenInvalid         = reason.New("token_invalid", reason.Unauthenticated, "the token was not accepted (signature, audience, expiry or issuer)")
	ValidatorUnavailable = reason.New("validator_unavailable", reason.Unavailable, "the token validator is unavailable; retry")
	ValidatorTimeout     = reason.New("validator_timeout", reason.Unavailable, "the token validator did not answer in time; retry")
	ValidatorError       = reason.New("validator_error", reason.Unavailable, "the token validator gave no identity; retry later")
	// SigningKeyUnknown: the token names a signing key (kid) its issuer's
	// keys, fetched moments ago, do not hold, and they may not be fetched
	// again yet. Not the validator's failure — it answered — and not yet
	// a verdict against the token: the issuer may have published the key
	// since (a rotation). Retryable, never cached, never failed open.
	SigningKeyUnknown = reason.New("signing_key_unknown", reason.Unavailable, "the token names a signing key its issuer had not published when its keys were last fetched; retry once they are fetched again")
)

// Reasons are the five failure classes, in the order above.
func Reasons() []reason.Reason {
	return []reason.Reason{TokenInvalid, ValidatorUnavailable, ValidatorTimeout, ValidatorError, SigningKeyUnknown}
}

// SaysNothingAboutCaller reports whether a failure of class r is about the
// validator rather than the credential: only these may fail open.
func SaysNothingAboutCaller(r reason.Reason) bool {
	return r == ValidatorUnavailable || r == ValidatorTimeout
}

// Error is an authentication failure: a class and the detail behind it.
// The detail is for logs; callers across a trust boundary get the reason.
type Error struct {
	Reason reason.Reason
	Err    error
	// Uncacheable marks a verdict that may change within moments — a
	// token signed by a key the verifier has not fetched yet — which a
	// cache must not keep.
	Uncacheable bool
}

// Cacheable reports whether a verdict cache may keep err.
func Cacheable(err error) bool {
	var e *Error
	return !errors.As(err, &e) || !e.Uncacheable
}

func (e *Error) Error() string {
	if e.Err == nil {
		return "authn: " + e.Reason.String()
	}
	return "authn: " + e.Reason.String() + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, authn.ErrTokenInvalid) and friends work.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Err == nil && t.Reason == e.Reason
}

// Sentinels for errors.Is, one per class.
var (
	ErrTokenInvalid         = &Error{Reason: TokenInvalid}
	ErrValidatorUnavailable = &Error{Reason: ValidatorUnavailable}
	ErrValidatorTimeout     = &Error{Reason: ValidatorTimeout}
	ErrValidatorError       = &Error{Reason: ValidatorError}
)

// Fail returns an *Error of class r with a formatted detail.
func Fail(r reason.Reason, format string, args ...any) error {
	return &Error{Reason: r, Err: fmt.Errorf(format, args...)}
}

// ReasonOf returns the class of an error from an Authenticator. An error
// that carries no class is validator_error: something answered, and it was
// not an identity. A context deadline is validator_timeout.
func ReasonOf(err error) reason.Reason {
	var e *Error
	switch {
	case err == nil:
		return reason.Reason{}
	case errors.As(err, &e):
		return e.Reason
	case errors.Is(err, context.DeadlineExceeded):
		return ValidatorTimeout
	default:
		return ValidatorError
	}
}

// The user.extra keys a Kubernetes API server sets in a TokenReview's
// answer for a service-account token (pod, node, credential id). authn/kube
// reads them; the dev issuer writes them.
const (
	ExtraPodName      = "authentication.kubernetes.io/pod-name"
	ExtraPodUID       = "authentication.kubernetes.io/pod-uid"
	ExtraNodeName     = "authentication.kubernetes.io/node-name"
	ExtraNodeUID      = "authentication.kubernetes.io/node-uid"
	ExtraCredentialID = "authentication.kubernetes.io/credential-id"
)
