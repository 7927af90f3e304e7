package pdp_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/serve"
)

// TestTraceAcrossTheCheck: a client's span reaches the pdp through the
// credentials package (W3C traceparent); the pdp continues it with a
// server span, and the guard's and the pdp's spans are its children; no
// span carries the token.
func TestTraceAcrossTheCheck(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	e := start(t, "enforce", nil)
	srv := httptest.NewTLSServer(serve.TraceHandler(e.srv.Handler(), "pdp"))
	defer srv.Close()
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	token := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := credentials.Config{Address: strings.TrimPrefix(srv.URL, "https://"), TLS: true, CAFile: caFile, TokenFile: tokenFile}.Transport()
	if err != nil {
		t.Fatal(err)
	}
	ctx, client := tp.Tracer("test-client").Start(context.Background(), "client call")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/check", bytes.NewReader(readExample(t, "check_request_allow_rotate.json")))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	client.End()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the check: %d", resp.StatusCode)
	}
	_ = tp.ForceFlush(context.Background())

	spans := rec.Ended()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.String(), token) || strings.Contains(a.Value.String(), "system:serviceaccount:") {
				t.Errorf("span %s carries %s = %.60s…: a token or a caller", s.Name(), a.Key, a.Value.String())
			}
		}
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				if strings.Contains(a.Value.String(), token) {
					t.Errorf("span %s's event %s carries the token", s.Name(), ev.Name)
				}
			}
		}
	}
	var server sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if sp.SpanKind() == trace.SpanKindServer {
			server = sp
		}
	}
	if server == nil {
		t.Fatalf("no server span among %d: %v", len(spans), names(spans))
	}
	if server.Parent().SpanID() != client.SpanContext().SpanID() || server.SpanContext().TraceID() != client.SpanContext().TraceID() {
		t.Errorf("the server span's parent is %v, want the client's %v", server.Parent().SpanID(), client.SpanContext().SpanID())
	}
	for _, name := range []string{"callerauth.authenticate", "callerauth.decide", "pdp.evaluate", "pdp.sign"} {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span among %v", name, names(spans))
			continue
		}
		if s.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("%s's parent is %v, want the server span %v", name, s.Parent().SpanID(), server.SpanContext().SpanID())
		}
	}
	for _, a := range byName["callerauth.decide"].Attributes() {
		if a.Key == "callerauth.allowed" && !a.Value.AsBool() {
			t.Error("the decide span says refused")
		}
	}
	var records int64
	for _, a := range byName["pdp.sign"].Attributes() {
		if a.Key == "pdp.group_records" {
			records = a.Value.AsInt64()
		}
	}
	if records != 1 { // one check, alone under its signature
		t.Errorf("the signature's span says %d records in the group, want 1", records)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
