package credentials_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"k8s.io/client-go/transport"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/kit/testjwt"
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
	tok := testjwt.Expiring("caller", time.Now().Add(time.Hour))
	for _, name := range []string{"no-token", "static-token", "file-token", "client-go-cached-file"} {
		b.Run(name, func(b *testing.B) {
			srv := startGRPCB(b)
			cfg := credentials.Config{Address: srv.addr, TLS: true, CAFile: srv.caFile, ServerName: "localhost"}
			p := filepath.Join(b.TempDir(), "token")
			if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
				b.Fatal(err)
			}
			var extra []grpc.DialOption
			switch name {
			case "file-token":
				cfg.TokenFile = p // re-read on every call, expiry checked
			case "static-token":
				extra = append(extra, grpc.WithPerRPCCredentials(staticToken(tok)))
			case "client-go-cached-file":
				// client-go's file token source: re-reads the file at most
				// once a minute.
				extra = append(extra, grpc.WithPerRPCCredentials(tokenSource{transport.NewCachedFileTokenSource(p)}))
			}
			client := dialB(b, cfg, extra...)
			b.ReportAllocs()
			for b.Loop() {
				if err := check(client); err != nil {
					b.Fatal(err)
				}
			}
			if got, _ := srv.rec.Last(); name != "no-token" && got != tok {
				b.Fatalf("%s: the server received %q", name, got)
			}
		})
	}
}

// staticToken sends one token, read once: the cheapest a bearer token can
// be, and the baseline for the file token's per-call re-read.
type staticToken string

func (t staticToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (staticToken) RequireTransportSecurity() bool { return true }

// tokenSource sends an oauth2.TokenSource's token, as grpc's oauth
// credentials do (without their Google dependencies).
type tokenSource struct{ ts oauth2.TokenSource }

func (s tokenSource) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	t, err := s.ts.Token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": t.Type() + " " + t.AccessToken}, nil
}

func (tokenSource) RequireTransportSecurity() bool { return true }
