package oidc_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"math/big"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/internal/forge"
)

// kubeClaims is the payload of a real bound service-account token.
func kubeClaims(iss string, now time.Time) map[string]any {
	return map[string]any{
		"iss": iss, "sub": "system:serviceaccount:nvsentinel:gpu-monitor", "aud": []string{"platform-connector"},
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": "5f1c2a4e-0b6e-4f0c-9d57-3c1c5e0a9b11",
		"kubernetes.io": map[string]any{
			"namespace":      "nvsentinel",
			"serviceaccount": map[string]string{"name": "gpu-monitor", "uid": "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"},
			"pod":            map[string]string{"name": "gpu-monitor-x2k4q", "uid": "1d2c3b4a-5e6f-4a8b-9c0d-1e2f3a4b5c6d"},
			"node":           map[string]string{"name": "node-a", "uid": "0b0c5b8e-3e0a-4bb0-9d8c-6f4b2a1d0e9f"},
		},
	}
}

// BenchmarkVerify runs the offline verifier beside the bare crypto/ecdsa,
// crypto/rsa or crypto/ed25519 verification of the same token, for ES256,
// RS256 and EdDSA: the digest of the signing input and the signature check,
// with the signature already decoded. The ratio verifier/crypto is the
// figure: what the verifier costs beyond the cryptography (splitting,
// decoding, the header, key lookup, the claims).
func BenchmarkVerify(b *testing.B) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		alg jose.SignatureAlgorithm
		key crypto.Signer
	}{{jose.ES256, ecKey()}, {jose.RS256, rk}, {jose.EdDSA, ed}} {
		p := newIDP(b, "https://idp.example")
		p.addKey("k1", tc.key)
		auth, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: p.issuer, DiscoveryURL: p.url, CAFile: p.caFile, Audiences: []string{"platform-connector"}, Algorithms: []string{string(tc.alg)}}}})
		if err != nil {
			b.Fatal(err)
		}
		tok := forge.Sign(kubeClaims(p.issuer, time.Now()), tc.key, tc.alg, "k1")
		ctx := context.Background()
		if _, err := auth.Authenticate(ctx, tok); err != nil {
			b.Fatal(err)
		}
		b.Run(string(tc.alg)+"/verifier", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := auth.Authenticate(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
		input, encSig, _ := strings.Cut(tok[strings.IndexByte(tok, '.')+1:], ".")
		input = tok[:strings.IndexByte(tok, '.')+1] + input
		sig, _ := base64.RawURLEncoding.DecodeString(encSig)
		b.Run(string(tc.alg)+"/crypto", func(b *testing.B) {
			b.ReportAllocs()
			switch k := tc.key.(type) {
			case *ecdsa.PrivateKey:
				r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
				for b.Loop() {
					digest := sha256.Sum256([]byte(input))
					if !ecdsa.Verify(&k.PublicKey, digest[:], r, s) {
						b.Fatal("bad signature")
					}
				}
			case *rsa.PrivateKey:
				for b.Loop() {
					digest := sha256.Sum256([]byte(input))
					if err := rsa.VerifyPKCS1v15(&k.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
						b.Fatal(err)
					}
				}
			case ed25519.PrivateKey:
				pub := k.Public().(ed25519.PublicKey)
				for b.Loop() {
					if !ed25519.Verify(pub, []byte(input), sig) {
						b.Fatal("bad signature")
					}
				}
			}
		})
	}
}
