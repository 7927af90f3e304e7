package guard_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/kit/testjwt"
)

// benchGuard is the whole pipeline on a cached verdict: bearer, the cache
// (hit), node binding, metrics, and a log line for refusals only (the
// allowed decision's line is BenchmarkCheckLogged's).
func benchGuard(b testing.TB) (*guard.Guard, string) {
	return benchGuardAt(b, slog.LevelWarn)
}

// benchGuardAt is benchGuard with the services' JSON logger at level.
func benchGuardAt(b testing.TB, level slog.Level) (*guard.Guard, string) {
	tok := testjwt.Expiring(agentSA, time.Now().Add(time.Hour))
	inner := authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) {
		return &authn.Caller{Username: agentSA, PodName: "p", NodeName: localNode, Expiry: time.Now().Add(time.Hour)}, nil
	})
	g, _ := newNodeGuard(b, guard.Config{
		Authenticator: authn.NewCache(authn.Layer{Authenticator: inner}, authn.CacheConfig{}).Layer(),
		Logger:        slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: level})),
	}, binding.NodeConfig{LocalNode: localNode, CrossNode: []string{monitorSA}})
	return g, tok
}

// BenchmarkGRPC compares a unary call through the guard interceptor with a
// cached verdict against the same server with no authentication, side by
// side, over a Unix socket (the connector's transport).
func BenchmarkGRPC(b *testing.B) {
	g, tok := benchGuard(b)
	for _, guarded := range []bool{false, true} {
		name := "no-auth"
		if guarded {
			name = "guard-cached"
		}
		b.Run(name, func(b *testing.B) {
			lis, err := net.Listen("unix", b.TempDir()+"/s.sock")
			if err != nil {
				b.Fatal(err)
			}
			icpt := grpc.UnaryServerInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(guard.NewContext(ctx, &guard.Verdict{Allowed: true}), req)
			})
			if guarded {
				icpt = g.UnaryServerInterceptor(extractNodes)
			}
			srv := grpc.NewServer(grpc.ChainUnaryInterceptor(icpt))
			srv.RegisterService(&eventsDesc, nil)
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
			in := stringsList([]string{"", localNode})
			out := new(structpb.ListValue)
			b.ReportAllocs()
			for b.Loop() {
				if err := conn.Invoke(ctx, reportMethod, in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHTTP compares a request through the guard middleware with a
// cached verdict against the same server with no authentication.
func BenchmarkHTTP(b *testing.B) {
	g, tok := benchGuard(b)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	extract := func(*http.Request) (binding.Request, error) { return binding.NodesRequest([]string{""}), nil }
	for _, guarded := range []bool{false, true} {
		name := "no-auth"
		var handler http.Handler = h
		if guarded {
			name = "guard-cached"
			handler = g.Middleware(extract)(h)
		}
		b.Run(name, func(b *testing.B) {
			srv := httptest.NewServer(handler)
			defer srv.Close()
			client := srv.Client()
			body := []byte(`{"nodes":[""]}`)
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/events", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}

// BenchmarkCheck is the pipeline alone, without a transport.
func BenchmarkCheck(b *testing.B) {
	g, tok := benchGuard(b)
	benchCheck(b, g, tok)
}

// BenchmarkCheckLogged is BenchmarkCheck with the services' JSON logger
// at info (an allowed decision writes its line, the default) and at warn
// (refusals only): the cost of the line, without the write's syscall.
func BenchmarkCheckLogged(b *testing.B) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		b.Run(level.String(), func(b *testing.B) {
			g, tok := benchGuardAt(b, level)
			benchCheck(b, g, tok)
		})
	}
}

func benchCheck(b *testing.B, g *guard.Guard, tok string) {
	ctx := context.Background()
	hdr := []string{"Bearer " + tok}
	req := binding.NodesRequest([]string{"", localNode})
	b.ReportAllocs()
	for b.Loop() {
		if v := g.Check(ctx, bearer.Parse(hdr), req); !v.Allowed {
			b.Fatal(v.Reason)
		}
	}
}
