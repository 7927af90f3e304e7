package token_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/callerauth/callerauth/token"
)

// A realistic service-account token payload (about 900 bytes encoded).
func benchJWT() string {
	exp := time.Now().Add(time.Hour).Unix()
	return jwt(fmt.Sprintf(`{"aud":["vmafx-controller"],"exp":%d,"iat":%d,"iss":"https://kubernetes.default.svc.cluster.local","jti":"5f1c2a4e-0b6e-4f0c-9d57-3c1c5e0a9b11","kubernetes.io":{"namespace":"vmafx","node":{"name":"node-a","uid":"0b0c5b8e-3e0a-4bb0-9d8c-6f4b2a1d0e9f"},"pod":{"name":"vmafx-operator-7c9d8f6b5-x2k4q","uid":"1d2c3b4a-5e6f-4a8b-9c0d-1e2f3a4b5c6d"},"serviceaccount":{"name":"vmafx-operator","uid":"9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"}},"nbf":%d,"sub":"system:serviceaccount:vmafx:vmafx-operator"}`, exp, exp-3600, exp-3600))
}

// BenchmarkFileWithExpiryCheck is the per-call client path: read the token
// file and check the JWT's exp before sending.
func BenchmarkFileWithExpiryCheck(b *testing.B) {
	p := filepath.Join(b.TempDir(), "token")
	writeFile(b, p, benchJWT())
	src := token.CheckExpiry(token.File(p))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Token(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFile is the file read alone, for comparison.
func BenchmarkFile(b *testing.B) {
	p := filepath.Join(b.TempDir(), "token")
	writeFile(b, p, benchJWT())
	src := token.File(p)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Token(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExpiry is the payload parse alone.
func BenchmarkExpiry(b *testing.B) {
	tok := benchJWT()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := token.Expiry(tok); !ok {
			b.Fatal("no exp")
		}
	}
}
