package oidc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/internal/kit/forge"
)

// TestKeyFetchSpan: a fetch of an issuer's keys that a traced request
// waits on is a span of its own under the request's, saying how many keys
// it found or that it failed — and never the token or a claim.
func TestKeyFetchSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	tracer := otel.Tracer("test")

	now := time.Now()
	p := newIDP(t, "https://idp.example")
	k := ecKey()
	p.addKey("k1", k)
	tok := forge.Sign(claims(p.issuer, now, nil), k, jose.ES256, "k1")
	auth := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{p.config("vmafx-controller")}})
	ctx, parent := tracer.Start(context.Background(), "request")
	if _, err := auth.Authenticate(ctx, tok); err != nil {
		t.Fatal(err)
	}
	parent.End()

	// An issuer with no usable key: the fetch fails.
	empty := newIDP(t, "https://empty.example")
	auth2 := newAuth(t, oidc.Config{Issuers: []oidc.IssuerConfig{empty.config("vmafx-controller")}})
	ctx2, parent2 := tracer.Start(context.Background(), "request")
	if _, err := auth2.Authenticate(ctx2, forge.Sign(claims(empty.issuer, now, nil), k, jose.ES256, "k1")); err == nil {
		t.Fatal("a token of an issuer without keys was accepted")
	}
	parent2.End()

	var fetches []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "callerauth.key_fetch" {
			fetches = append(fetches, s)
		}
		for _, kv := range s.Attributes() {
			if v := kv.Value.String(); strings.Contains(v, tok) || strings.Contains(v, "alice") || strings.Contains(v, "idp.example") {
				t.Errorf("span %s carries %s = %.40s", s.Name(), kv.Key, v)
			}
		}
	}
	if len(fetches) != 2 {
		t.Fatalf("%d key-fetch spans, want 2", len(fetches))
	}
	ok, failed := fetches[0], fetches[1]
	if ok.Parent().SpanID() != parent.SpanContext().SpanID() || failed.Parent().SpanID() != parent2.SpanContext().SpanID() {
		t.Error("a key fetch is not a child of the request that waited on it")
	}
	if ok.Status().Code == codes.Error || attr(ok, "callerauth.keys") != "1" {
		t.Errorf("the fetch that found a key: status %v, keys %q", ok.Status(), attr(ok, "callerauth.keys"))
	}
	if failed.Status().Code != codes.Error {
		t.Errorf("the fetch that found none: status %v", failed.Status())
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}
