// Package forge crafts hostile and hand-signed tokens for the tests that
// prove verifiers refuse them: alg none, HS256 keyed with a public key,
// tampered signatures, and tokens signed by keys the verifier does not
// trust.
package forge

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

var b64 = base64.RawURLEncoding

func segment(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b64.EncodeToString(b)
}

// Sign signs claims with key under alg, with kid in the header.
func Sign(claims any, key crypto.Signer, alg jose.SignatureAlgorithm, kid string) string {
	b, err := json.Marshal(claims)
	if err != nil {
		panic(err)
	}
	return SignRaw(b, key, alg, kid)
}

// SignRaw signs the payload bytes as they are (a claim twice, say).
func SignRaw(payload []byte, key crypto.Signer, alg jose.SignatureAlgorithm, kid string) string {
	return SignRawWith(payload, key, alg, kid, nil)
}

// SignRawWith signs the payload bytes with the header go-jose's options
// give (a "crit" member, say).
func SignRawWith(payload []byte, key crypto.Signer, alg jose.SignatureAlgorithm, kid string, opts *jose.SignerOptions) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, opts)
	if err != nil {
		panic(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		panic(err)
	}
	s, err := jws.CompactSerialize()
	if err != nil {
		panic(err)
	}
	return s
}

// SignPSSMaxSalt signs claims with an RSA key under PS256 with the
// longest salt the key allows, not RFC 7518 §3.5's hash-length salt.
func SignPSSMaxSalt(claims any, key *rsa.PrivateKey, kid string) string {
	input := segment(map[string]string{"alg": "PS256", "kid": kid}) + "." + segment(claims)
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPSS(rand.Reader, key, crypto.SHA256, sum[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto})
	if err != nil {
		panic(err)
	}
	return input + "." + b64.EncodeToString(sig)
}

// AlgNone returns an unsigned token with "alg":"none" and an empty
// signature.
func AlgNone(claims any, kid string) string {
	return segment(map[string]string{"alg": "none", "kid": kid}) + "." + segment(claims) + "."
}

// HS256WithPublicKey signs claims with HMAC-SHA256 keyed by the DER (PKIX)
// encoding of a public key: the classic algorithm-confusion attack on a
// verifier that would pass the public key to an HMAC check.
func HS256WithPublicKey(claims any, pub crypto.PublicKey, kid string) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	input := segment(map[string]string{"alg": "HS256", "kid": kid, "typ": "JWT"}) + "." + segment(claims)
	m := hmac.New(sha256.New, der)
	m.Write([]byte(input))
	return input + "." + b64.EncodeToString(m.Sum(nil))
}

// WithClaims replaces the payload of a signed token, keeping its header and
// signature: the signature no longer matches.
func WithClaims(tok string, claims any) string {
	p := strings.Split(tok, ".")
	return p[0] + "." + segment(claims) + "." + p[2]
}

// FlipSignature changes one bit of the signature.
func FlipSignature(tok string) string {
	p := strings.Split(tok, ".")
	sig, err := b64.DecodeString(p[2])
	if err != nil || len(sig) == 0 {
		panic("forge: token has no signature")
	}
	sig[len(sig)/2] ^= 0x01
	return p[0] + "." + p[1] + "." + b64.EncodeToString(sig)
}

// Claims decodes a token's payload, unverified.
func Claims(tok string) map[string]any {
	p := strings.Split(tok, ".")
	b, err := b64.DecodeString(p[1])
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

// KeyID returns the kid in a token's header.
func KeyID(tok string) string {
	b, err := b64.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		panic(err)
	}
	var h struct {
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(b, &h)
	return h.Kid
}
