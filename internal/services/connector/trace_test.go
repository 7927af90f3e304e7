package connector_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
)

// TestStoreIsASpan: under a recording span (traces on), storing a batch
// is a child span with the database conventions' attributes, and none of
// an event's, the caller's or the key's values.
func TestStoreIsASpan(t *testing.T) {
	o := options(t, `{"enableNodeBindingAuth": false}`)
	o.Socket, o.Datastore = filepath.Join(t.TempDir(), "pc.sock"), filepath.Join(t.TempDir(), "events.db")
	s := newServer(t, o, nil)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "rpc")
	batch := &pcv1.HealthEvents{IdempotencyKey: "secret-key-1", Events: []*pcv1.HealthEvent{
		{Version: 1, Agent: "agent-x", CheckName: "GpuXid", Message: "xid 79", NodeName: "node-a"},
		{Version: 1, Agent: "agent-x", CheckName: "GpuXid", Message: "xid 48", NodeName: "node-a"}}}
	for range 2 { // the second: a retry, already stored
		if _, err := s.Publish(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Store().Close()
	batch.IdempotencyKey = "secret-key-2"
	if _, err := s.Publish(ctx, batch); err == nil {
		t.Fatal("a batch was stored in a closed datastore")
	}
	parent.End()
	var stores []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() != "connector.store" {
			continue
		}
		stores = append(stores, sp)
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Error("a store span is not the call's child")
		}
		for _, kv := range sp.Attributes() {
			if v := kv.Value.String(); strings.Contains(v, "secret-key") || strings.Contains(v, "xid") || strings.Contains(v, "agent-x") {
				t.Errorf("%s carries %s", kv.Key, v)
			}
		}
	}
	if len(stores) != 3 {
		t.Fatalf("%d store spans, want 3", len(stores))
	}
	attrs := func(sp sdktrace.ReadOnlySpan) map[string]string {
		m := map[string]string{}
		for _, kv := range sp.Attributes() {
			m[string(kv.Key)] = kv.Value.String()
		}
		return m
	}
	first, retry, failed := attrs(stores[0]), attrs(stores[1]), attrs(stores[2])
	if first["db.system.name"] != "sqlite" || first["db.operation.name"] != "INSERT" || first["connector.events"] != "2" || first["connector.duplicate"] != "false" {
		t.Errorf("the first batch's span: %v", first)
	}
	if retry["connector.duplicate"] != "true" {
		t.Errorf("the retry's span: %v", retry)
	}
	if stores[2].Status().Code != codes.Error || failed["db.system.name"] != "sqlite" {
		t.Errorf("the failed store's span: %v, status %v", failed, stores[2].Status())
	}
}
