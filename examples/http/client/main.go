// Command client calls the example HTTP server's GET /hello with the
// bearer token in a file (a projected service-account token, which the
// kubelet renews), read again on every request, over TLS. It prints the
// outcome: "accepted <the answer>", or "refused <reason>" with the reason
// callerauth gave. With -expect it exits 1 unless the outcome is that.
//
//	client -url https://127.0.0.1:8443/hello -ca ca.crt -token-file token -expect accepted
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/callerauth/callerauth/credentials"
)

func main() {
	url := flag.String("url", "", "the server's /hello, https://")
	ca := flag.String("ca", "", "CA bundle (PEM) the server's certificate is checked against")
	tokenFile := flag.String("token-file", "", "file holding the bearer token")
	expect := flag.String("expect", "", `exit 1 unless the outcome starts with this ("accepted", "refused role_missing")`)
	flag.Parse()
	outcome, err := get(*url, *ca, *tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	fmt.Println(outcome)
	if *expect != "" && !strings.HasPrefix(outcome, *expect) {
		fmt.Fprintf(os.Stderr, "client: expected %q\n", *expect)
		os.Exit(1)
	}
}

func get(url, ca, tokenFile string) (string, error) {
	// callerauth: TLS and the token file, read on every request.
	transport, err := credentials.Config{TLS: true, CAFile: ca, TokenFile: tokenFile}.Transport()
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode == http.StatusOK {
		return "accepted " + strings.TrimSpace(string(body)), nil
	}
	// A refusal is {"reason": ..., "error": ...}.
	var refusal struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &refusal); err != nil || refusal.Reason == "" {
		return "", fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	}
	return "refused " + refusal.Reason, nil
}
