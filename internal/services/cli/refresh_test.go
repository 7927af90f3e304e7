package cli_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/token"
)

// TestTokenRefresh: a client registered with `issuer client` gets tokens
// from the dev issuer's client-credentials endpoint through `token
// refresh`, which keeps the file current while it runs.
func TestTokenRefresh(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	r := execute(context.Background(), t, "", time.Time{}, "issuer", "client", "--state-dir", iss.StateDir(), "--client-id", "node-a1",
		"--subject", "node-a1", "--scope", "vmafx:node", "--scope", "vmafx:reader", "--audience", "vmafx-controller", "--token-lifetime", "2s", "--secret-file", secret)
	if r.err != nil {
		t.Fatal(r.err)
	}
	out := filepath.Join(dir, "token")
	args := []string{"token", "refresh", "--token-url", srv.URL + devissuer.PathToken, "--ca-file", iss.CAFile(), "--client-id", "node-a1",
		"--client-secret-file", secret, "--scope", "vmafx:node", "--audience", "vmafx-controller", "--out", out}
	if r := execute(context.Background(), t, "", time.Time{}, append(args, "--once")...); r.err != nil {
		t.Fatalf("%v %s", r.err, r.stderr.String())
	}
	first, _ := os.ReadFile(out)
	c, err := token.ReadClaims(strings.TrimSpace(string(first)))
	if err != nil || c.Subject != "node-a1" || c.Issuer != "https://idp.tenant-a.example" || c.Audience[0] != "vmafx-controller" {
		t.Fatalf("claims %+v %v", c, err)
	}
	payload, _ := token.Payload(strings.TrimSpace(string(first)))
	if !strings.Contains(string(payload), `"scp":"vmafx:node"`) {
		t.Fatalf("payload %s", payload)
	}
	// Running: the 2 s token is replaced before it expires.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { execute(ctx, t, "", time.Time{}, args...); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		if len(b) > 0 && string(b) != string(first) {
			if exp, ok := token.Expiry(strings.TrimSpace(string(b))); !ok || !time.Now().Before(exp) {
				t.Fatalf("the renewed file holds an expired token")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the token file was never renewed")
		}
	}
	// A wrong secret is refused for good.
	_ = os.WriteFile(filepath.Join(dir, "wrong"), []byte("nope"), 0o600)
	bad := append([]string{}, args...)
	bad[9] = filepath.Join(dir, "wrong")
	if r := execute(context.Background(), t, "", time.Time{}, bad...); r.err == nil || !strings.Contains(r.err.Error(), "refuses this client") {
		t.Fatalf("wrong secret: %v", r.err)
	}
	if r := execute(context.Background(), t, "", time.Time{}, "token", "refresh", "--token-url", "http://x/token", "--client-id", "a", "--client-secret-file", secret, "--out", out); r.err == nil || !strings.Contains(r.err.Error(), "want an https:// URL") {
		t.Fatalf("plain http: %v", r.err)
	}
}

// TestTokenEndpointRefusals: the errors of RFC 6749 §5.2.
func TestTokenEndpointRefusals(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	secret, err := iss.AddClient(devissuer.Client{ID: "c1", Subject: "s", Scopes: []string{"a"}, Audiences: []string{"x"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(iss.CAFile())
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	for _, tt := range []struct {
		name       string
		form       url.Values
		user, pass string
		code       int
		want       string
	}{
		{"wrong grant", url.Values{"grant_type": {"password"}}, "c1", secret, 400, "unsupported_grant_type"},
		{"wrong secret", url.Values{"grant_type": {"client_credentials"}}, "c1", "nope", 401, "invalid_client"},
		{"unknown client", url.Values{"grant_type": {"client_credentials"}}, "c2", secret, 401, "invalid_client"},
		{"a scope not granted", url.Values{"grant_type": {"client_credentials"}, "scope": {"a b"}}, "c1", secret, 400, "invalid_scope"},
		{"an audience not granted", url.Values{"grant_type": {"client_credentials"}, "audience": {"y"}}, "c1", secret, 400, "invalid_target"},
		{"granted", url.Values{"grant_type": {"client_credentials"}}, "c1", secret, 200, `"token_type":"Bearer"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+devissuer.PathToken, strings.NewReader(tt.form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.SetBasicAuth(tt.user, tt.pass)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b := new(strings.Builder)
			_, _ = io.Copy(b, resp.Body)
			if resp.StatusCode != tt.code || !strings.Contains(b.String(), tt.want) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}
}
