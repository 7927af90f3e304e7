// Package recorder is a loopback server that records the bearer tokens its
// callers present, for tests and the demo: a gRPC server (the standard health
// service behind a recording interceptor) and an HTTP handler.
package recorder

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// Recorder remembers the Authorization values of the calls it served, in
// order. A call without one is recorded as "". It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	tokens []string
}

// Tokens returns the tokens received so far, "Bearer " removed.
func (r *Recorder) Tokens() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.tokens...)
}

// Len returns how many calls were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tokens)
}

// Last returns the last token received and whether any call was recorded.
func (r *Recorder) Last() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.tokens) == 0 {
		return "", false
	}
	return r.tokens[len(r.tokens)-1], true
}

func (r *Recorder) record(authz string) {
	r.mu.Lock()
	r.tokens = append(r.tokens, strings.TrimPrefix(authz, "Bearer "))
	r.mu.Unlock()
}

// UnaryInterceptor records each unary call's authorization metadata.
func (r *Recorder) UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.record(strings.Join(md.Get("authorization"), ","))
	return h(ctx, req)
}

// NewGRPCServer returns a gRPC server with the health service, recording
// every unary call.
func (r *Recorder) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(r.UnaryInterceptor))...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	return s
}

// ServeHTTP records the request's Authorization header and answers 204.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.record(strings.Join(req.Header.Values("Authorization"), ","))
	w.WriteHeader(http.StatusNoContent)
}
