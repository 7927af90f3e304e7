package serve_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/serve"
)

// TestGRPCServerContinuesTheTrace: a gRPC server made with the manager's
// options continues the trace of a client that calls through the
// credentials package (traceparent in the metadata).
func TestGRPCServerContinuesTheTrace(t *testing.T) {
	o := serve.NewOptions("127.0.0.1:0", "")
	o.LogOutput = io.Discard
	o.Tracing = serve.Tracing{Endpoint: "127.0.0.1:1", Protocol: "grpc", Insecure: true, SampleRatio: 1}
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	m, err := serve.New("svc", o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.GRPCServerOptions()) == 0 {
		t.Fatal("no server options with traces on")
	}
	// The manager made the process's provider; record into ours instead.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	srv := grpc.NewServer(m.GRPCServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cfg := credentials.Config{Address: "unix://" + sock}
	conn, err := cfg.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, client := tp.Tracer("test").Start(context.Background(), "client")
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	client.End()
	var server sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			server = s
		}
	}
	if server == nil || !strings.Contains(server.Name(), "Health/Check") {
		t.Fatalf("no server span of the call: %v", rec.Ended())
	}
	if server.Parent().SpanID() != client.SpanContext().SpanID() {
		t.Errorf("the server span's parent is %v, want the client's %v", server.Parent().SpanID(), client.SpanContext().SpanID())
	}

	o.Tracing = serve.Tracing{Protocol: "grpc", SampleRatio: 1}
	off, err := serve.New("svc", o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(off.GRPCServerOptions()) != 0 {
		t.Error("server options with traces off")
	}
}

func TestTracingSettingsRefused(t *testing.T) {
	for want, tr := range map[string]serve.Tracing{
		"want host:port":            {Endpoint: "collector", Protocol: "grpc", SampleRatio: 1},
		"want grpc or http":         {Endpoint: "127.0.0.1:4317", Protocol: "thrift", SampleRatio: 1},
		"want 0 to 1":               {Endpoint: "127.0.0.1:4317", Protocol: "grpc", SampleRatio: 2},
		"only to a loopback":        {Endpoint: "collector.example:4317", Protocol: "grpc", Insecure: true, SampleRatio: 1},
		"belong to --otlp-endpoint": {Protocol: "grpc", Insecure: true, SampleRatio: 1},
	} {
		o := serve.NewOptions("127.0.0.1:0", "")
		o.Tracing = tr
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", tr, err, want)
		}
	}
}
