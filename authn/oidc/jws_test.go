package oidc

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestCritB64: "crit" is understood for RFC 7797's "b64" alone, with the
// value true (the ordinary encoding, which go-jose and the API server
// take); any other extension, an empty list, "b64" false or absent, is
// refused (RFC 7515 §4.1.11, RFC 7519 §7.2).
func TestCritB64(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	for header, want := range map[string]string{
		`{"alg":"ES256","crit":["b64"],"b64":true}`:       "",
		`{"alg":"ES256","crit": [ "b64" ],"b64": true}`:   "",
		`{"alg":"ES256","b64":true}`:                      "",
		`{"alg":"ES256","crit":["b64"],"b64":false}`:      `"b64" other than true`,
		`{"alg":"ES256","b64":false}`:                     `"b64" other than true`,
		`{"alg":"ES256","crit":["b64"]}`:                  `"crit"`,
		`{"alg":"ES256","crit":["exp"],"exp":1}`:          `"crit"`,
		`{"alg":"ES256","crit":["b64","exp"],"b64":true}`: `"crit"`,
		`{"alg":"ES256","crit":[],"b64":true}`:            `"crit"`,
		`{"alg":"ES256","crit":"b64","b64":true}`:         `"crit"`,
	} {
		_, err := parseCompact(enc([]byte(header))+"."+enc([]byte(`{}`))+".c2ln", []string{"ES256"})
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", header, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v; want an error naming %s", header, err, want)
		}
	}
}
