package credentials_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/testjwt"
	"github.com/callerauth/callerauth/token"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// BenchmarkHTTPBearer is the per-request client path without the network:
// read the token file, check its expiry, clone the request and set the
// header.
func BenchmarkHTTPBearer(b *testing.B) {
	p := filepath.Join(b.TempDir(), "token")
	if err := os.WriteFile(p, []byte(testjwt.Expiring("system:serviceaccount:vmafx:operator", time.Now().Add(time.Hour))), 0o600); err != nil {
		b.Fatal(err)
	}
	ok := &http.Response{StatusCode: http.StatusNoContent, Body: io.NopCloser(strings.NewReader(""))}
	rt := credentials.BearerTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Authorization") == "" {
			b.Fatal("no Authorization header")
		}
		return ok, nil
	}), token.CheckExpiry(token.File(p)), false)
	req, _ := http.NewRequest(http.MethodGet, "https://controller.example/v1/jobs", nil)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		_ = resp.Body.Close()
	}
}

// BenchmarkGRPCCall compares a unary call over loopback TLS with and without
// the per-RPC file token, side by side: the difference is the cost the
// credentials add to each call.
func BenchmarkGRPCCall(b *testing.B) {
	for _, withToken := range []bool{false, true} {
		name := "no-token"
		if withToken {
			name = "file-token"
		}
		b.Run(name, func(b *testing.B) {
			srv := startGRPCB(b)
			cfg := credentials.Config{Address: srv.addr, TLS: true, CAFile: srv.caFile, ServerName: "localhost"}
			if withToken {
				p := filepath.Join(b.TempDir(), "token")
				if err := os.WriteFile(p, []byte(testjwt.Expiring("caller", time.Now().Add(time.Hour))), 0o600); err != nil {
					b.Fatal(err)
				}
				cfg.TokenFile = p
			}
			client := dialB(b, cfg)
			b.ReportAllocs()
			for b.Loop() {
				if err := check(client); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
