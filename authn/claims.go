package authn

import (
	"strings"
	"time"

	"github.com/callerauth/callerauth/token"
)

// CheckLifetime refuses a token whose exp has passed or whose nbf (or iat)
// is still in the future. leeway is the clock skew allowed on nbf and iat
// only: an issuer whose clock runs slightly ahead must not make fresh tokens
// unusable. exp has none: from exp on the token is refused, as the client's
// expiry check refuses to send it. A zero exp is refused: every token
// callerauth accepts expires.
func CheckLifetime(c *token.Claims, now time.Time, leeway time.Duration) error {
	exp, nbf, iat := c.ExpiresAt(), c.NotValidBefore(), c.Issued()
	switch {
	case exp.IsZero():
		return Fail(TokenInvalid, "token has no exp")
	case !now.Before(exp):
		return Fail(TokenInvalid, "token expired at %s", exp.UTC().Format(time.RFC3339))
	case !nbf.IsZero() && now.Add(leeway).Before(nbf):
		return Fail(TokenInvalid, "token is not valid before %s", nbf.UTC().Format(time.RFC3339))
	case !iat.IsZero() && now.Add(leeway).Before(iat):
		return Fail(TokenInvalid, "token was issued in the future, at %s", iat.UTC().Format(time.RFC3339))
	}
	return nil
}

// Intersect returns the members of want that are in have, in want's order.
func Intersect(want, have []string) []string {
	var out []string
	for _, w := range want {
		for _, h := range have {
			if w == h {
				out = append(out, w)
				break
			}
		}
	}
	return out
}

// ServiceAccountOf splits a service account's username,
// system:serviceaccount:<namespace>:<name>.
func ServiceAccountOf(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != ""
}

// ServiceAccountGroups are the groups the API server gives a service
// account in namespace ns.
func ServiceAccountGroups(ns string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}
