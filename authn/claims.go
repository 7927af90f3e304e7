package authn

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// MaxTokenLength is the longest token any backend will look at; longer ones
// are token_invalid before any validator is asked.
const MaxTokenLength = 16 << 10

// UnverifiedClaims are claims read from a JWT's payload without verifying
// it. Backends read them only to route a token to its issuer, or after the
// token has been accepted (TokenReview does not return iat and exp).
type UnverifiedClaims struct {
	Issuer    string
	IssuedAt  time.Time
	NotBefore time.Time
	Expiry    time.Time
	ID        string
}

// ReadUnverified decodes the payload of a compact JWS. ok is false when tok
// is not one.
func ReadUnverified(tok string) (UnverifiedClaims, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(tok) > MaxTokenLength {
		return UnverifiedClaims{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return UnverifiedClaims{}, false
	}
	var c struct {
		Iss string   `json:"iss"`
		Iat *float64 `json:"iat"`
		Nbf *float64 `json:"nbf"`
		Exp *float64 `json:"exp"`
		Jti string   `json:"jti"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return UnverifiedClaims{}, false
	}
	return UnverifiedClaims{Issuer: c.Iss, IssuedAt: seconds(c.Iat), NotBefore: seconds(c.Nbf), Expiry: seconds(c.Exp), ID: c.Jti}, true
}

func seconds(f *float64) time.Time {
	if f == nil || *f <= 0 || *f > 1<<40 {
		return time.Time{}
	}
	sec := int64(*f)
	return time.Unix(sec, int64((*f-float64(sec))*1e9))
}

// CheckLifetime refuses a token whose exp has passed or whose nbf (or iat)
// is still in the future. leeway is the clock skew allowed on nbf and iat
// only: an issuer whose clock runs slightly ahead must not make fresh tokens
// unusable. exp has none: from exp on the token is refused, as the client's
// expiry check refuses to send it. A zero exp is refused: every token
// callerauth accepts expires.
func CheckLifetime(c UnverifiedClaims, now time.Time, leeway time.Duration) error {
	switch {
	case c.Expiry.IsZero():
		return Fail(TokenInvalid, "token has no exp")
	case !now.Before(c.Expiry):
		return Fail(TokenInvalid, "token expired at %s", c.Expiry.UTC().Format(time.RFC3339))
	case !c.NotBefore.IsZero() && now.Add(leeway).Before(c.NotBefore):
		return Fail(TokenInvalid, "token is not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	case !c.IssuedAt.IsZero() && now.Add(leeway).Before(c.IssuedAt):
		return Fail(TokenInvalid, "token was issued in the future, at %s", c.IssuedAt.UTC().Format(time.RFC3339))
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

// ServiceAccountGroups are the groups the API server gives a service
// account in namespace ns.
func ServiceAccountGroups(ns string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}
