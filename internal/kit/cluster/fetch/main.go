// Command fetch is a caller for the test cluster's pods: it sends one
// HTTPS request with the bearer token of a file (the one the kubelet
// projects, say), trusting a CA file, and prints the status code on its
// first line and the body after, for the test to read from the pod's log.
// It exits 1 when no answer came. internal/kit/cluster builds it into an
// image (FetchImage).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
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
	flag.Parse()
	if err := run(*url, *method, *tokenFile, *caFile, *serverName, *bodyFile); err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
}

func run(url, method, tokenFile, caFile, serverName, bodyFile string) error {
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
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
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
