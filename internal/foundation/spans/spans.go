// Package spans starts OpenTelemetry spans for callerauth's own work:
// only as children of a span that records (traces on, and this trace
// sampled), at no cost otherwise. A span's attributes name what happened,
// never a token, a claim value or a request body (docs/monitoring.md
// "Traces").
package spans

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Start starts a span named name, a child of ctx's span, when that one
// records; otherwise it returns ctx and its span, which records nothing.
// tracer names the package (its import path). The span is made by the
// parent's own tracer provider: the library links OpenTelemetry's trace
// API alone, not its global state.
func Start(ctx context.Context, tracer, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(tracer).Start(ctx, name, opts...)
}

// Fail marks span failed with a fixed description (what failed, never an
// error's text, which may quote what it was given).
func Fail(span trace.Span, what string) {
	if span.IsRecording() {
		span.SetStatus(codes.Error, what)
	}
}
