package token

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrExpired matches every [*ExpiredError] with errors.Is.
var ErrExpired = errors.New("token: expired")

// ExpiredError reports a JWT whose exp claim has passed. It is returned before
// anything is sent.
type ExpiredError struct {
	// Source names where the token came from, e.g. file "/var/run/token".
	Source string
	// Expiry is the token's exp claim.
	Expiry time.Time
	// Now is the time the check was made.
	Now time.Time
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("token: token from %s expired at %s (%s ago); not sending it — is whatever refreshes it still running?",
		e.Source, e.Expiry.UTC().Format(time.RFC3339), e.Now.Sub(e.Expiry).Round(time.Second))
}

// Is reports whether target is [ErrExpired].
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// ExpiryOption configures [CheckExpiry].
type ExpiryOption func(*expiryChecker)

// WithClock sets the clock the expiry is compared against. The default is
// time.Now.
func WithClock(now func() time.Time) ExpiryOption {
	return func(c *expiryChecker) { c.now = now }
}

// CheckExpiry wraps src so that a JWT whose exp has passed is refused with an
// [*ExpiredError] instead of being returned. A token is expired when the
// current time is at or after exp (RFC 7519 §4.1.4). Tokens that are not
// JWTs, and JWTs without a numeric exp, pass through unchanged. Errors from
// src pass through unchanged.
func CheckExpiry(src Source, opts ...ExpiryOption) Source {
	c := &expiryChecker{src: src, name: describe(src), now: time.Now}
	for _, o := range opts {
		o(c)
	}
	return c
}

type expiryChecker struct {
	src  Source
	name string
	now  func() time.Time
	// last remembers the previous token and its expiry, so that the common
	// case — the same file content call after call — costs one string
	// comparison instead of a base64 and JSON decode.
	last atomic.Pointer[parsedToken]
}

type parsedToken struct {
	tok string
	exp time.Time
	ok  bool
}

func (c *expiryChecker) String() string { return c.name }

func (c *expiryChecker) Token(ctx context.Context) (string, error) {
	tok, err := c.src.Token(ctx)
	if err != nil {
		return "", err
	}
	p := c.last.Load()
	if p == nil || p.tok != tok {
		p = &parsedToken{tok: tok}
		p.exp, p.ok = Expiry(tok)
		c.last.Store(p)
	}
	exp, ok := p.exp, p.ok
	if !ok {
		return tok, nil
	}
	if now := c.now(); !now.Before(exp) {
		return "", &ExpiredError{Source: c.name, Expiry: exp, Now: now}
	}
	return tok, nil
}

// Expiry returns the exp claim of tok when tok is a compact JWS whose payload
// is a JSON object with a NumericDate exp ([ReadClaims]). It does not verify
// the signature. ok is false for anything else: a token that is not a JWT, a
// payload that is not base64url I-JSON, a JWT with no exp, or an exp that is
// not a NumericDate.
func Expiry(tok string) (exp time.Time, ok bool) {
	c, err := ReadClaims(tok)
	if err != nil || c.Expiry == nil {
		return time.Time{}, false
	}
	return c.Expiry.Time, true
}
