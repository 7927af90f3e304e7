package guard

// Spans of the guard's work, children of the request's span when the
// service records one (traces on: docs/monitoring.md "Traces"); nothing
// otherwise. Their attributes name the verdict, never the caller, a
// token or a claim.

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the guard's tracer: what a service gives
// Config.Tracer (otel.Tracer(guard.TracerName)).
const TracerName = "github.com/callerauth/callerauth/guard"

// startSpan starts a child of ctx's span when the guard has a tracer and
// that span records.
func (g *Guard) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if g.cfg.Tracer == nil || !parent.IsRecording() {
		return ctx, parent
	}
	return g.cfg.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
}

// endAuthentication ends an authentication's span with what it found.
func endAuthentication(span trace.Span, a *Authentication, backend string) {
	if !span.IsRecording() {
		return
	}
	if backend != "" {
		span.SetAttributes(attribute.String("callerauth.backend", backend))
	}
	span.SetAttributes(attribute.Bool("callerauth.cached", a.cached), attribute.Bool("callerauth.credential_absent", a.absent),
		attribute.Bool("callerauth.degraded", a.degraded))
	if a.viol != nil {
		span.SetAttributes(attribute.String("callerauth.reason", a.viol.Reason.String()))
	}
	span.End()
}

// endVerdict ends a verdict's span with the verdict.
func endVerdict(span trace.Span, v *Verdict) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Bool("callerauth.allowed", v.Allowed), attribute.String("callerauth.mode", string(v.Mode)))
	if !v.Reason.IsZero() {
		span.SetAttributes(attribute.String("callerauth.reason", v.Reason.String()))
	}
	if !v.Allowed {
		span.SetStatus(codes.Error, v.Reason.String())
	}
	span.End()
}
