// Package jaeger starts Jaeger v1.75.0 (its v2 binary, an OpenTelemetry
// Collector distribution) on loopback as the OTLP receiver the trace tests
// export to, keeping spans in memory, and reads them back through its
// query API. The binary is built by `make jaeger-tools`
// (test/tools/jaeger) and found through $CALLERAUTH_JAEGER_BIN, or under
// .cache/jaeger/<version> at the repository root.
package jaeger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/proc"
)

// Version is the Jaeger release the harness builds and runs.
const Version = "v1.75.0"

// Server is a running Jaeger.
type Server struct {
	// OTLP is its OTLP/gRPC receiver (host:port), OTLPHTTP its OTLP/HTTP
	// one, both plain text on loopback.
	OTLP, OTLPHTTP string
	query          string
	proc           *proc.Process
}

// Bin finds the jaeger binary.
func Bin() (string, error) {
	dir := os.Getenv("CALLERAUTH_JAEGER_BIN")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "test", "tools", "jaeger", "go.mod")); err == nil {
				dir = filepath.Join(d, ".cache", "jaeger", Version)
				break
			}
			if filepath.Dir(d) == d {
				return "", errors.New("jaeger: no repository root above the working directory")
			}
		}
	}
	bin := filepath.Join(dir, "jaeger")
	if _, err := os.Stat(bin); err != nil { //nolint:gosec // the harness's own cache path, or the developer's CALLERAUTH_JAEGER_BIN.
		return "", fmt.Errorf("jaeger: %s is missing: run make jaeger-tools (make test does): %w", bin, err)
	}
	return bin, nil
}

// Start runs Jaeger in dir until Stop, its ports chosen now.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	ports, err := loopback.Ports(4)
	if err != nil {
		return nil, err
	}
	s := &Server{OTLP: fmt.Sprintf("127.0.0.1:%d", ports[0]), OTLPHTTP: fmt.Sprintf("127.0.0.1:%d", ports[1]), query: fmt.Sprintf("http://127.0.0.1:%d", ports[2])}
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
extensions:
  jaeger_query:
    storage: {traces: memory}
    http: {endpoint: "127.0.0.1:%d"}
    grpc: {endpoint: "127.0.0.1:%d"}
  jaeger_storage:
    backends:
      memory:
        memory: {max_traces: 10000}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "%s"}
      http: {endpoint: "%s"}
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
`, ports[2], ports[3], s.OTLP, s.OTLPHTTP)
	file := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if s.proc, err = proc.Start(proc.Spec{Bin: bin, Args: []string{"--config", file}, Dir: dir}); err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := s.get(ctx, "/api/services"); err == nil {
			return s, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("jaeger did not answer in 60 s: %w\n%s", err, s.proc.Output())
		}
	}
}

// Stop ends it.
func (s *Server) Stop() { _ = s.proc.Stop() }

// Span is a span as Jaeger's query API returns it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []KeyValue `json:"tags"`
	Logs []struct {
		Fields []KeyValue `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

// KeyValue is a tag.
type KeyValue struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// Parent is the span's CHILD_OF reference ("" for a root).
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Trace is one trace: its spans, and each span's service by process.
type Trace struct {
	TraceID   string `json:"traceID"`
	Spans     []Span `json:"spans"`
	Processes map[string]struct {
		ServiceName string     `json:"serviceName"`
		Tags        []KeyValue `json:"tags"`
	} `json:"processes"`
}

// Service is the service that recorded span s.
func (t Trace) Service(s Span) string { return t.Processes[s.ProcessID].ServiceName }

// Trace reads one trace by its ID (hex).
func (s *Server) Trace(ctx context.Context, traceID string) (Trace, error) {
	b, err := s.get(ctx, "/api/traces/"+url.PathEscape(traceID))
	if err != nil {
		return Trace{}, err
	}
	var r struct {
		Data []Trace `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Trace{}, fmt.Errorf("jaeger: %w", err)
	}
	if len(r.Data) != 1 {
		return Trace{}, fmt.Errorf("jaeger: trace %s: %d found", traceID, len(r.Data))
	}
	return r.Data[0], nil
}

// Traces finds the traces in which service recorded a span named
// operation, at most limit, the newest first.
func (s *Server) Traces(ctx context.Context, service, operation string, limit int) ([]Trace, error) {
	q := url.Values{"service": {service}, "operation": {operation}, "limit": {strconv.Itoa(limit)}, "lookback": {"1h"}}
	b, err := s.get(ctx, "/api/traces?"+q.Encode())
	if err != nil {
		return nil, err
	}
	var r struct {
		Data []Trace `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	return r.Data, nil
}

func (s *Server) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.query+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaeger: GET %s: %d %.200s", path, resp.StatusCode, b)
	}
	return b, nil
}
