package framing_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/framing"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/malformed"
)

// serveFramed serves h on a loopback Listener — over TLS with cfg, or
// plaintext — with a read timeout of minutes, far beyond the probe's
// deadline: a request held until it would fail the probe.
func serveFramed(t *testing.T, cfg *tls.Config, h http.Handler) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := framing.Refused(r); ok {
			w.Header().Set("Connection", "close")
			http.Error(w, p.Text, http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	}), ConnContext: framing.ConnContext, ReadHeaderTimeout: 5 * time.Minute, ReadTimeout: 5 * time.Minute}
	go func() { _ = srv.Serve(framing.Listener(lis, cfg, 10*time.Second, http.DefaultMaxHeaderBytes+4096)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

// serverTLS is a CA and a loopback serving configuration it signed,
// offering h2 and HTTP/1.1 as the services do.
func serverTLS(t *testing.T) (*pki.CA, *tls.Config) {
	t.Helper()
	ca, err := pki.NewCA("framing test")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ca.ServerTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return ca, cfg
}

// reading answers what it read of the body; ignoring reads none.
var (
	reading = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "the body could not be read", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "read %d bytes; TLS %v", len(b), r.TLS != nil)
	})
	ignoring = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
)

// TestMalformedRequestsAreRefusedAtOnce: every malformed shape is
// answered at once and its connection closed, by a handler that reads
// the body and by one that reads none, over plaintext and TLS; a
// well-framed pipelined pair is answered whole. Without the framing
// reader, both framings with a body framed by its length, and a body
// declared on a GET and never sent, are held until the read timeout.
func TestMalformedRequestsAreRefusedAtOnce(t *testing.T) {
	ca, srvTLS := serverTLS(t)
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"a handler that reads the body", reading}, {"a handler that reads none", ignoring}} {
		t.Run(h.name+", plaintext", func(t *testing.T) {
			addr := serveFramed(t, nil, h.h)
			malformed.Check(t, malformed.TCPDialer(addr), addr, "/", "", "{}")
		})
		t.Run(h.name+", TLS", func(t *testing.T) {
			addr := serveFramed(t, srvTLS, h.h)
			malformed.Check(t, malformed.TLSDialer(addr, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}), addr, "/", "", "{}")
		})
	}
}

// TestWellFramedRequestsPass: bodies framed by their length and by
// chunks, of every size around the reader's buffers, read whole and in
// order on one keep-alive connection, over TLS (Request.TLS set) and
// HTTP/2.
func TestWellFramedRequestsPass(t *testing.T) {
	ca, srvTLS := serverTLS(t)
	addr := serveFramed(t, srvTLS, reading)
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		client := &http.Client{Transport: tr, Timeout: malformed.Deadline}
		for _, n := range []int{0, 1, 4095, 4096, 4097, 70000, 1 << 20} {
			for _, chunked := range []bool{false, true} {
				var body io.Reader = strings.NewReader(strings.Repeat("x", n))
				if chunked {
					body = io.MultiReader(body) // no length known: sent chunked over HTTP/1.1
				}
				resp, err := client.Post("https://"+addr+"/", "application/json", body)
				if err != nil {
					t.Fatalf("h2 %v, %d bytes, chunked %v: %v", h2, n, chunked, err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if want := fmt.Sprintf("read %d bytes; TLS true", n); resp.StatusCode != 200 || string(b) != want || (resp.ProtoMajor == 2) != h2 {
					t.Fatalf("h2 %v, %d bytes, chunked %v: %s %d %q; want %q", h2, n, chunked, resp.Proto, resp.StatusCode, b, want)
				}
			}
		}
		tr.CloseIdleConnections()
	}
}
