// Package token provides the client half of bearer authentication: where a
// token comes from, and the check that stops an expired one from leaving the
// process.
//
// A [Source] returns the token to send on one call. [File] reads a file again
// on every call — that is the refresh: whatever keeps the file current (a
// Secret the kubelet updates through its ..data symlink swap, a projected
// service-account token, a sidecar that renews it) takes effect on the next
// call, with no restart (on Linux, inotify spares the per-call stat while
// nothing on the way to the file changes; see [File]). [Static] returns a
// fixed token, for tests and inline configuration.
//
// [CheckExpiry] wraps any source: a token that is a JWT whose exp claim has
// passed is not returned; the call fails with an [*ExpiredError] that names the
// source and the expiry, so a refresher that stopped reads as that and not as
// a bare Unauthenticated from the server. A token that is not a JWT, or a JWT
// without exp, passes through unchanged. The payload is read without
// verifying the signature: the check is a courtesy to the operator, never a
// security decision; the server verifies.
//
//	src := token.CheckExpiry(token.File("/var/run/secrets/tokens/controller"))
//	tok, err := src.Token(ctx)
//	var expired *token.ExpiredError
//	if errors.As(err, &expired) {
//		log.Printf("token in %s expired at %s", expired.Source, expired.Expiry)
//	}
package token
