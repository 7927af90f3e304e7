// Package testjwt builds unsigned JWT-shaped strings for tests of code that
// reads a token's claims without verifying it (the client expiry check).
package testjwt

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// Unsigned returns header.payload.signature with the claims as payload and
// a junk signature.
func Unsigned(claims map[string]any) string {
	b, err := json.Marshal(claims)
	if err != nil {
		panic(err)
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT"}`)) + "." + enc.EncodeToString(b) + ".c2ln"
}

// Expiring returns an unsigned JWT for subject that expires at exp.
func Expiring(subject string, exp time.Time) string {
	return Unsigned(map[string]any{"sub": subject, "exp": exp.Unix(), "iat": exp.Add(-time.Hour).Unix()})
}
