package credentials

// W3C Trace Context: a call made with a context that carries an
// OpenTelemetry span sends its traceparent (and tracestate), so that the
// service called continues the caller's trace.

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

var traceContext propagation.TraceContext

// traced reports whether ctx carries a span to continue.
func traced(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }

// traceHeaders are the traceparent and tracestate of ctx's span; nil when
// ctx carries none.
func traceHeaders(ctx context.Context) propagation.MapCarrier {
	if !traced(ctx) {
		return nil
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c
}

// traceTransport sends the request context's traceparent.
type traceTransport struct{ base http.RoundTripper }

func (t traceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !traced(req.Context()) {
		return t.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	traceContext.Inject(req.Context(), propagation.HeaderCarrier(r.Header))
	return t.base.RoundTrip(r)
}

// withTrace adds ctx's traceparent to a gRPC call's metadata.
func withTrace(ctx context.Context) context.Context {
	h := traceHeaders(ctx)
	for k, v := range h {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	return ctx
}

func traceUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withTrace(ctx), method, req, reply, cc, opts...)
}

func traceStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(withTrace(ctx), desc, cc, method, opts...)
}
