package oidc

import (
	"crypto/rsa"
	"encoding/json"
	"testing"
)

// FuzzJWKS feeds arbitrary documents to the JWKS reading the verifier does
// (decode, then keep the usable keys): it never panics, and what it keeps
// is only ever a valid public signing key — never a symmetric or private
// one, whatever the document claims.
func FuzzJWKS(f *testing.F) {
	for _, s := range []string{
		`{"keys":[]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0","use":"sig","kid":"a"}]}`,
		`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0","d":"jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI","kid":"p"}]}`,
		`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","use":"enc"}]}`,
		`{"keys":null}`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var set struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if json.Unmarshal(doc, &set) != nil {
			return
		}
		keys, _ := readKeys(set.Keys)
		for _, k := range keys {
			if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
				t.Fatalf("kept a key that is not a valid public signing key: %+v", k)
			}
			if _, symmetric := k.Key.([]byte); symmetric {
				t.Fatalf("kept a symmetric key: %+v", k)
			}
			if rsaKey, ok := k.Key.(*rsa.PublicKey); ok && rsaKey.N.BitLen() < MinRSABits {
				t.Fatalf("kept an RSA key of %d bits", rsaKey.N.BitLen())
			}
		}
	})
}
