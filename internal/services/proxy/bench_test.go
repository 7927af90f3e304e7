package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/foundation/copybuf"
)

// answer is an upstream in memory: what the proxy itself costs, without a
// network between.
type answer struct{}

func (answer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"allow":true}`)),
		ContentLength: 14, Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// BenchmarkHandler is one allowed request through callerauth-proxy's
// handler (the verdict cached, the identity headers set) beside the bare
// ReverseProxy's, both to the same in-memory upstream.
func BenchmarkHandler(b *testing.B) {
	iss, _ := devissuertest.Serve(b, devissuer.Config{})
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "demo", ServiceAccount: "client", Audiences: []string{"up"}})
	if err != nil {
		b.Fatal(err)
	}
	cert, key, err := iss.IssueServingCert(b.TempDir(), "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	o := NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput = "127.0.0.1:0", "", io.Discard
	o.Serve.TLSCertFile, o.Serve.TLSKeyFile = cert, key
	o.Callers.Kubeconfig, o.Upstream, o.Callers.Audience, o.AllowServiceAccounts = iss.KubeconfigFile(), "http://127.0.0.1:1", "up", []string{"demo:client"}
	c, err := o.Complete()
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(c)
	if err != nil {
		b.Fatal(err)
	}
	s.proxy.Transport = answer{}
	up, _ := url.Parse("http://127.0.0.1:1")
	bare := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.Out.Host = pr.In.Host; pr.SetXForwarded() },
		Transport: answer{}, BufferPool: &copybuf.Pool{}}
	run := func(b *testing.B, h http.Handler, auth bool) {
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "https://127.0.0.1/metrics", nil)
			if auth {
				r.Header.Set("Authorization", "Bearer "+tok.Token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
	}
	b.Run("callerauth-proxy", func(b *testing.B) { run(b, s.Handler(), true) })
	b.Run("bare", func(b *testing.B) { run(b, bare, false) })
}

// BenchmarkOverTLS is BenchmarkHandler over real TLS connections, to a
// real upstream: what a process pays per request, in one process.
func BenchmarkOverTLS(b *testing.B) {
	iss, _ := devissuertest.Serve(b, devissuer.Config{})
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "demo", ServiceAccount: "client", Audiences: []string{"up"}})
	if err != nil {
		b.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"allow":true}`))
	}))
	defer upstream.Close()
	cert, key, err := iss.IssueServingCert(b.TempDir(), "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	o := NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput = "127.0.0.1:0", "", io.Discard
	o.Serve.TLSCertFile, o.Serve.TLSKeyFile = cert, key
	o.Callers.Kubeconfig, o.Upstream, o.Callers.Audience, o.AllowServiceAccounts = iss.KubeconfigFile(), upstream.URL, "up", []string{"demo:client"}
	c, err := o.Complete()
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(c)
	if err != nil {
		b.Fatal(err)
	}
	up, _ := url.Parse(upstream.URL)
	bare := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.Out.Host = pr.In.Host; pr.SetXForwarded() },
		Transport: transport(c), BufferPool: &copybuf.Pool{}}
	run := func(b *testing.B, h http.Handler, auth bool) {
		srv := httptest.NewTLSServer(h)
		defer srv.Close()
		client := srv.Client()
		client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
		b.ReportAllocs()
		b.SetParallelism(4) // 8 connections on 2 CPUs
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
				if auth {
					r.Header.Set("Authorization", "Bearer "+tok.Token)
				}
				resp, err := client.Do(r)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Error(resp.Status)
					return
				}
			}
		})
	}
	b.Run("callerauth-proxy", func(b *testing.B) { run(b, s.Handler(), true) })
	b.Run("bare", func(b *testing.B) { run(b, bare, false) })
}
