// Package traces_test runs a client → callerauth-proxy → pdp flow with
// every process exporting OpenTelemetry spans to a real OTLP receiver
// (Jaeger, test/tools/jaeger), and reads the trace back: one trace, each
// hop's spans children of the hop before, and no token or caller in any
// span.
package traces_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	secretsengine "github.com/callerauth/callerauth/examples/secrets-engine"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/jaeger"
)

var pdpBin, proxyBin string

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/pdp", "cmd/callerauth-proxy"}, func() (func(), error) {
		pdpBin, proxyBin = bins["pdp"], bins["callerauth-proxy"]
		if _, err := jaeger.Bin(); err != nil {
			return nil, err
		}
		return nil, nil
	})
}

func TestTraceAcrossThreeHops(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	j, err := jaeger.Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Stop()
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	ca, err := pki.NewCA("traces")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certPEM, keyPEM, err := ca.Issue("localhost", pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := write("tls.crt", certPEM), write("tls.key", keyPEM)
	caFile, err := ca.WriteCA(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	signing := filepath.Join(dir, "signing.pem")
	if err := decision.GenerateKeyFile(signing); err != nil {
		t.Fatal(err)
	}
	policyDir, registry, err := secretsengine.WriteTo(filepath.Join(dir, "package"))
	if err != nil {
		t.Fatal(err)
	}
	const engine = "system:serviceaccount:secrets-engine:secrets-engine"
	// The pdp exports over OTLP/gRPC, the proxy over OTLP/HTTP.
	pdp := e2e.Start(t, pdpBin, []string{"--listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key, "--metrics-listen", "",
		"--policy-dir", policyDir, "--registry", registry, "--signing-key-file", signing, "--kubeconfig", iss.KubeconfigFile(),
		"--caller-binding", "secrets-engine=" + engine, "--otlp-endpoint", j.OTLP, "--otlp-insecure"})
	pdpAddr := pdp.LogValue(t, "pdp: serving", "address", 60*time.Second)
	proxy := e2e.Start(t, proxyBin, []string{"--listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key, "--metrics-listen", "",
		"--upstream", "https://" + pdpAddr, "--upstream-ca-file", caFile, "--pass-bearer-token", "--kubeconfig", iss.KubeconfigFile(),
		"--caller-audience", "flex-auth", "--allow-service-account", "secrets-engine:secrets-engine",
		"--otlp-endpoint", j.OTLPHTTP, "--otlp-protocol", "http", "--otlp-insecure"})
	proxyAddr := proxy.LogValue(t, "callerauth-proxy: serving", "address", 60*time.Second)

	// The client: its own tracer provider, exporting to the same receiver.
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLP), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resource.NewWithAttributes("", attribute.String("service.name", "test-client"))))
	defer func() { _ = tp.Shutdown(ctx) }()
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: "secrets-engine", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := credentials.Config{Address: proxyAddr, TLS: true, CAFile: caFile, TokenFile: write("token", []byte(tok.Token))}.Transport()
	if err != nil {
		t.Fatal(err)
	}
	callCtx, call := tp.Tracer("test-client").Start(ctx, "client: check through the proxy")
	req, _ := http.NewRequestWithContext(callCtx, http.MethodPost, "https://"+proxyAddr+"/v1/check", bytes.NewReader(secretsengine.AllowRequest()))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: rt, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	call.End()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the check through the proxy: %d", resp.StatusCode)
	}
	traceID := call.SpanContext().TraceID().String()

	// The services export in batches (every 5 s): wait for all three.
	var tr jaeger.Trace
	services := map[string]bool{}
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if tr, err = j.Trace(ctx, traceID); err == nil {
			services = map[string]bool{}
			for _, s := range tr.Spans {
				services[tr.Service(s)] = true
			}
			if services["test-client"] && services["callerauth-proxy"] && services["pdp"] && len(tr.Spans) >= 11 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trace in Jaeger: %v; services %v, %d spans", err, services, len(tr.Spans))
		}
	}
	byID := map[string]jaeger.Span{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
		for _, kv := range s.Tags {
			if v := fmt.Sprint(kv.Value); strings.Contains(v, tok.Token) || strings.Contains(v, "system:serviceaccount:") || strings.Contains(v, "Bearer") {
				t.Errorf("%s's span %s carries %s = %.60s…", tr.Service(s), s.OperationName, kv.Key, v)
			}
		}
		for _, l := range s.Logs {
			for _, kv := range l.Fields {
				if strings.Contains(fmt.Sprint(kv.Value), tok.Token) {
					t.Errorf("%s's span %s has an event carrying the token", tr.Service(s), s.OperationName)
				}
			}
		}
	}
	// find is the one span of service named name (a prefix for the HTTP
	// spans, whose names otelhttp writes).
	find := func(service, name string, kind string) jaeger.Span {
		t.Helper()
		for _, s := range tr.Spans {
			if tr.Service(s) != service || !strings.HasPrefix(s.OperationName, name) || (name == "" && strings.HasPrefix(s.OperationName, "callerauth.")) {
				continue
			}
			if kind != "" && tag(s, "span.kind") != kind {
				continue
			}
			return s
		}
		var have []string
		for _, s := range tr.Spans {
			have = append(have, tr.Service(s)+"/"+s.OperationName+"/"+tag(s, "span.kind"))
		}
		t.Fatalf("no %s span %q (%s) among %v", service, name, kind, have)
		return jaeger.Span{}
	}
	client := find("test-client", "client:", "")
	proxyServer := find("callerauth-proxy", "", "server")
	proxyUpstream := find("callerauth-proxy", "", "client")
	pdpServer := find("pdp", "", "server")
	proxyAuth, pdpAuth := find("callerauth-proxy", "callerauth.authenticate", ""), find("pdp", "callerauth.authenticate", "")
	for _, a := range []jaeger.Span{proxyAuth, pdpAuth} {
		// The first call: a miss of each verdict cache, a TokenReview.
		if tag(a, "callerauth.backend") != "tokenreview" || tag(a, "callerauth.cached") != "false" {
			t.Errorf("%s's authentication: backend %q, cached %q; want tokenreview, false", tr.Service(a), tag(a, "callerauth.backend"), tag(a, "callerauth.cached"))
		}
	}
	proxyReview, pdpReview := find("callerauth-proxy", "callerauth.token_review", "client"), find("pdp", "callerauth.token_review", "client")
	for _, r := range []jaeger.Span{proxyReview, pdpReview} {
		if tag(r, "callerauth.authenticated") != "true" {
			t.Errorf("%s's TokenReview: authenticated %q", tr.Service(r), tag(r, "callerauth.authenticated"))
		}
	}
	chain := []struct {
		what          string
		child, parent jaeger.Span
	}{
		{"the proxy's server span, under the client's call", proxyServer, client},
		{"the proxy's guard, under its server span", find("callerauth-proxy", "callerauth.decide", ""), proxyServer},
		{"the proxy's upstream call, under its server span", proxyUpstream, proxyServer},
		{"the pdp's server span, under the proxy's upstream call", pdpServer, proxyUpstream},
		{"the proxy's TokenReview, under its authentication", proxyReview, proxyAuth},
		{"the pdp's authentication, under its server span", pdpAuth, pdpServer},
		{"the pdp's TokenReview, under its authentication", pdpReview, pdpAuth},
		{"the pdp's verdict, under its server span", find("pdp", "callerauth.decide", ""), pdpServer},
		{"the pdp's evaluation, under its server span", find("pdp", "pdp.evaluate", ""), pdpServer},
		{"the pdp's signature, under its server span", find("pdp", "pdp.sign", ""), pdpServer},
	}
	for _, c := range chain {
		if c.child.Parent() != c.parent.SpanID {
			p := byID[c.child.Parent()]
			t.Errorf("%s: its parent is %s/%s", c.what, tr.Service(p), p.OperationName)
		}
	}
}

func tag(s jaeger.Span, key string) string {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}
