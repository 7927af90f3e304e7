// Command fetch is a caller for the test cluster's pods: it sends one
// HTTPS request with the bearer token of a file (the one the kubelet
// projects, say), trusting a CA file, and prints the status code on its
// first line and the body after, for the test to read from the pod's log.
// It exits 1 when no answer came. internal/kit/cluster builds it into an
// image (FetchImage).
//
// A Service's address routes only once kube-proxy has written its rules,
// which can trail the pod's readiness (the endpoints reach kube-proxy
// through a watch of their own): so the connection, and only it, is tried
// again until --connect-for has passed. Once connected, the request is
// sent once, never again.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	url := flag.String("url", "", "https URL")
	method := flag.String("method", http.MethodGet, "HTTP method")
	tokenFile := flag.String("token-file", "", "bearer token file (empty: no Authorization header)")
	caFile := flag.String("ca-file", "", "CA bundle the server's certificate is checked against")
	serverName := flag.String("server-name", "", "name the server's certificate must carry")
	bodyFile := flag.String("body-file", "", "request body (JSON)")
	connectFor := flag.Duration("connect-for", time.Minute, "how long a refused or unrouted connection is tried again")
	flag.Parse()
	if err := run(*url, *method, *tokenFile, *caFile, *serverName, *bodyFile, *connectFor); err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
}

func run(url, method, tokenFile, caFile, serverName, bodyFile string, connectFor time.Duration) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s: no certificate", caFile)
	}
	var body []byte
	if bodyFile != "" {
		if body, err = os.ReadFile(bodyFile); err != nil {
			return err
		}
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tokenFile != "" {
		tok, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	c := &http.Client{Timeout: connectFor + 30*time.Second, Transport: &http.Transport{
		DialContext:     dialFor(connectFor),
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	fmt.Printf("%d\n%s\n", resp.StatusCode, b)
	return nil
}

// dialFor dials until a connection is made or d has passed, each try
// bounded by a few seconds and a pause between tries; the last error says
// how many tries there were. Nothing is printed between tries: the pod's
// log is the answer alone.
func dialFor(d time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		end := time.Now().Add(d)
		dialer := net.Dialer{Timeout: 5 * time.Second}
		for tries := 1; ; tries++ {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				return conn, nil
			}
			if ctx.Err() != nil || time.Now().Add(500*time.Millisecond).After(end) {
				return nil, fmt.Errorf("%w (%d tries in %s)", err, tries, d)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}
