package oidc

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// idTokenShape refuses, for an AuthenticationConfiguration's issuer, a
// token the API server refuses before any mapping runs: its OIDC library
// decodes the payload into typed members, so that
//   - "nonce" and "at_hash" must be strings (or null);
//   - "_claim_names" must be an object of strings (or null), each naming
//     a member of "_claim_sources" (distributed claims, OpenID Connect Core
//     §5.6.2), which must be an object of objects (or null) whose
//     "endpoint" and "access_token" are strings (or null).
//
// A token failing one is token_invalid here as there; test/authconfig
// asserts each against the real API server.
//
// That library also matches member names without regard to case (Go's
// encoding/json): "EXP" is its "exp" when it comes later. A member whose
// name differs from one of these only in case is refused — the API server
// would read a value callerauth does not (an "EXP" in the past: it refuses
// a token callerauth would accept), as with a name written twice.
func idTokenShape(c *claims) error {
	var names, sources []byte
	for _, m := range c.other {
		for _, n := range oidcLibraryClaims {
			if string(m.name) != n && strings.EqualFold(string(m.name), n) {
				return authn.Fail(authn.TokenInvalid, "claim %q differs from %q only in case: another reader would take one for the other", m.name, n)
			}
		}
		switch string(m.name) {
		case "nonce", "at_hash":
			if _, ok := ijson.String(m.value); !ok && !isNull(m.value) {
				return authn.Fail(authn.TokenInvalid, "claim %q is not a string", m.name)
			}
		case "_claim_names":
			names = m.value
		case "_claim_sources":
			sources = m.value
		}
	}
	var known map[string]bool // the sources; none when absent
	if sources != nil && !isNull(sources) {
		known = map[string]bool{}
		if !isObject(sources) {
			return authn.Fail(authn.TokenInvalid, `claim "_claim_sources" is not an object`)
		}
		err := ijson.Members(sources, func(name, v []byte) error {
			s := string(name)
			known[s] = true
			if isNull(v) {
				return nil
			}
			if !isObject(v) {
				return fmt.Errorf("_claim_sources: %q is not an object", s)
			}
			return ijson.Members(v, func(k, f []byte) error {
				switch string(k) {
				case "endpoint", "access_token":
					if _, ok := ijson.String(f); !ok && !isNull(f) {
						return fmt.Errorf("_claim_sources: %q: %s is not a string", s, k)
					}
				}
				return nil
			})
		})
		if err != nil {
			return authn.Fail(authn.TokenInvalid, "claim %v", err)
		}
	}
	if names != nil && !isNull(names) {
		if !isObject(names) {
			return authn.Fail(authn.TokenInvalid, `claim "_claim_names" is not an object`)
		}
		err := ijson.Members(names, func(name, v []byte) error {
			src, ok := ijson.String(v)
			switch {
			case !ok && !isNull(v):
				return fmt.Errorf("_claim_names: the source of %q is not a string", name)
			case src == "":
				return fmt.Errorf("_claim_names: %q names no source", name)
			case !known[src]:
				return fmt.Errorf("_claim_names: %q names source %q, which _claim_sources lacks", name, src)
			}
			return nil
		})
		if err != nil {
			return authn.Fail(authn.TokenInvalid, "claim %v", err)
		}
	}
	return nil
}

// oidcLibraryClaims are the members the API server's OIDC library decodes
// into typed fields.
var oidcLibraryClaims = []string{"iss", "sub", "aud", "exp", "iat", "nbf", "nonce", "at_hash", "_claim_names", "_claim_sources"}

func isNull(v []byte) bool   { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
func isObject(v []byte) bool { v = bytes.TrimSpace(v); return len(v) > 0 && v[0] == '{' }
