package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// RPCMetrics registers, on reg, the RPC series every gRPC service exports,
// and returns the interceptor that feeds them; put it first in the chain,
// so that refusals by the guard and the limits are counted and timed too:
//
//	<prefix>_rpcs_total{method, code}          RPCs answered, by full method and gRPC code
//	<prefix>_rpc_duration_seconds{method}      time to answer, authentication and storage included
func RPCMetrics(reg prometheus.Registerer, prefix string) (grpc.UnaryServerInterceptor, error) {
	count := prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "_rpcs_total",
		Help: "RPCs answered, by method and gRPC code (refusals included)."}, []string{"method", "code"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "_rpc_duration_seconds",
		Help:    "Time to answer an RPC, authentication and storage included, by method.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"method"})
	for _, c := range []prometheus.Collector{count, latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: registering the RPC metrics: %w", err)
		}
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		latency.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
		count.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
		return resp, err
	}, nil
}
