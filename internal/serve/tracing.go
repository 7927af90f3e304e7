package serve

// OpenTelemetry traces (docs/monitoring.md "Traces"): off by default; with
// --otlp-endpoint, spans are exported over OTLP (gRPC or HTTP), W3C
// traceparent is continued from callers and sent on.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/callerauth/callerauth/internal/foundation/version"
)

// Tracing is where spans go.
type Tracing struct {
	// Endpoint is the OTLP receiver's host:port; empty: no traces.
	Endpoint string
	// Protocol is grpc or http (OTLP/HTTP, protobuf).
	Protocol string
	// CAFile verifies the receiver's certificate; empty: the system roots.
	CAFile string
	// Insecure sends spans in plain text, to a loopback Endpoint only.
	Insecure bool
	// SampleRatio is the share of traces that start here that are
	// recorded; a trace a caller started is recorded as the caller chose.
	SampleRatio float64
	// Service is the spans' service.name: the binary's name, which a
	// service's NewOptions sets (vmafx-node); empty: the manager's name.
	Service string
}

// On reports whether traces are exported.
func (t Tracing) On() bool { return t.Endpoint != "" }

func (t *Tracing) addFlags(f *pflag.FlagSet) {
	f.StringVar(&t.Endpoint, "otlp-endpoint", t.Endpoint, "export OpenTelemetry traces to this OTLP receiver (host:port): an OpenTelemetry Collector, Jaeger; empty: no traces")
	f.StringVar(&t.Protocol, "otlp-protocol", t.Protocol, "grpc or http (OTLP/HTTP with protobuf)")
	f.StringVar(&t.CAFile, "otlp-ca-file", t.CAFile, "CA bundle (PEM) the receiver's certificate is checked against (default: the system roots)")
	f.BoolVar(&t.Insecure, "otlp-insecure", t.Insecure, "send spans in plain text: only to a loopback --otlp-endpoint (a collector beside the process)")
	f.Float64Var(&t.SampleRatio, "trace-sample-ratio", t.SampleRatio, "the share (0 to 1) of traces starting here that are recorded; a caller's traceparent decides for the traces it started")
}

func (t Tracing) validate() error {
	if !t.On() {
		if t.Insecure || t.CAFile != "" {
			return errors.New("serve: --otlp-insecure and --otlp-ca-file belong to --otlp-endpoint")
		}
		return nil
	}
	var errs []error
	host, _, err := net.SplitHostPort(t.Endpoint)
	if err != nil {
		errs = append(errs, fmt.Errorf("serve: --otlp-endpoint %q: want host:port", t.Endpoint))
	}
	if t.Protocol != "grpc" && t.Protocol != "http" {
		errs = append(errs, fmt.Errorf("serve: --otlp-protocol %q: want grpc or http", t.Protocol))
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("serve: --trace-sample-ratio %g: want 0 to 1", t.SampleRatio))
	}
	if t.Insecure {
		if ip := net.ParseIP(host); err == nil && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			errs = append(errs, fmt.Errorf("serve: --otlp-insecure sends spans in plain text only to a loopback --otlp-endpoint; %q is not one", t.Endpoint))
		}
		if t.CAFile != "" {
			errs = append(errs, errors.New("serve: --otlp-ca-file and --otlp-insecure contradict each other"))
		}
	}
	return errors.Join(errs...)
}

// start makes the process's tracer provider, exporting to t's receiver
// as service, and makes it and the W3C trace-context propagator the
// process's own (otel's globals, which the libraries' spans use). It
// returns what flushes and stops it.
func (t Tracing) start(service string) (func(context.Context) error, error) {
	if t.Service != "" {
		service = t.Service
	}
	var tlsCfg *tls.Config
	if !t.Insecure {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("serve: --otlp-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("serve: --otlp-ca-file %s: no PEM certificate", t.CAFile)
			}
			tlsCfg.RootCAs = pool
		}
	}
	var exp sdktrace.SpanExporter
	var err error
	if t.Protocol == "http" {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(t.Endpoint)}
		if t.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		} else {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsCfg))
		}
		exp, err = otlptracehttp.New(context.Background(), opts...)
	} else {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(t.Endpoint)}
		if t.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		} else {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tlsCfg)))
		}
		exp, err = otlptracegrpc.New(context.Background(), opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("serve: --otlp-endpoint: %w", err)
	}
	res := resource.NewWithAttributes("", attribute.String("service.name", service), attribute.String("service.version", version.Get().Version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SampleRatio))))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return tp.Shutdown(ctx)
	}, nil
}

// TraceHandler continues a caller's trace (W3C traceparent) in a server
// span around h, named as the server is (otelhttp: the HTTP semantic
// conventions; no header, query or body is recorded). A no-op tracer
// provider (traces off) records nothing.
func TraceHandler(h http.Handler, name string) http.Handler {
	return otelhttp.NewHandler(h, name)
}

// GRPCServerOptions are what a service's gRPC server is made with: with
// traces on, a stats handler that continues a caller's trace (W3C
// traceparent in the metadata) in a server span (otelgrpc, the RPC
// semantic conventions; no metadata or message is recorded).
func (m *Manager) GRPCServerOptions() []grpc.ServerOption {
	if !m.opts.Tracing.On() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler())}
}
