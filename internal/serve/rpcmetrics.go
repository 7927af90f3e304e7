package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RPCMetrics are the RPC series every gRPC service exports:
//
//	<prefix>_rpcs_total{method, code}          RPCs answered, by full method and gRPC code
//	<prefix>_rpc_duration_seconds{method}      time to answer, authentication and storage included
type RPCMetrics struct {
	count   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// NewRPCMetrics registers the series on reg.
func NewRPCMetrics(reg prometheus.Registerer, prefix string) (*RPCMetrics, error) {
	m := &RPCMetrics{
		count: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "_rpcs_total",
			Help: "RPCs answered, by method and gRPC code (refusals included)."}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "_rpc_duration_seconds",
			Help:    "Time to answer an RPC, authentication and storage included, by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.count, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: registering the RPC metrics: %w", err)
		}
	}
	return m, nil
}

// Interceptor feeds the series; put it first in the chain, so that
// refusals by the guard and the limits are counted and timed too.
func (m *RPCMetrics) Interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.latency.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	m.count.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	return resp, err
}

// Init starts every method srv serves at zero (code OK), so that a
// healthy, idle service exports the series an alert or a dashboard reads.
func (m *RPCMetrics) Init(srv *grpc.Server) {
	for name, info := range srv.GetServiceInfo() {
		for _, method := range info.Methods {
			full := "/" + name + "/" + method.Name
			m.count.WithLabelValues(full, codes.OK.String())
			m.latency.WithLabelValues(full)
		}
	}
}
