// Command bare-proxy is net/http/httputil's ReverseProxy and nothing else,
// serving TLS on loopback in front of one upstream: no authentication, no
// authorization, no metrics — the floor callerauth-proxy is measured
// against in make bench-compare (docs/performance.md).
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/copybuf"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "loopback address")
	upstream := flag.String("upstream", "", "http://HOST:PORT")
	cert := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	key := flag.String("tls-key-file", "", "its key (PEM)")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		fmt.Fprintf(os.Stderr, "bare-proxy: --upstream %q: want http://HOST:PORT\n", *upstream)
		os.Exit(2)
	}
	// The transport callerauth-proxy uses: the default, no proxy from the
	// environment, 64 idle connections to the upstream.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy, tr.MaxIdleConnsPerHost, tr.ResponseHeaderTimeout = nil, 64, 30*time.Second
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:  tr,
		BufferPool: &copybuf.Pool{}, // as callerauth-proxy's, its copy buffers are pooled
	}
	srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}}
	if err := srv.ListenAndServeTLS(*cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
