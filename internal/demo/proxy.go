package demo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

// proxyRBAC: callerauth-proxy with Kubernetes RBAC (the dev issuer's
// SubjectAccessReview) in front of a plain HTTP server that knows nothing
// of tokens.
func proxyRBAC(ctx context.Context, e *env) Result {
	r := Result{
		Scenario: "callerauth-proxy, Kubernetes RBAC, in front of a plain HTTP server",
		Expected: "a granted account through as itself; one RBAC does not allow: 403 rbac_denied; again: 0 TokenReviews, 0 SubjectAccessReviews; a WebSocket upgrade without --allow-websocket: 400 bad_request",
	}
	const aud = "hello-svc"
	client := "system:serviceaccount:demo:client"
	if err := e.iss.Grant(devissuer.AccessGrant{User: client, Verb: "get", NonResourceURL: "/hello"}); err != nil {
		return fail(r, err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Who the proxy says called, as JSON (a string, never markup).
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Header.Get("X-Remote-User"))
	}))
	defer up.Close()
	dir, err := os.MkdirTemp(e.dir, "proxy-")
	if err != nil {
		return fail(r, err)
	}
	cert, key, err := e.iss.IssueServingCert(dir, "127.0.0.1")
	if err != nil {
		return fail(r, err)
	}
	o := proxy.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput = "127.0.0.1:0", "", io.Discard
	o.Serve.TLSCertFile, o.Serve.TLSKeyFile = cert, key
	o.Callers.Kubeconfig, o.Upstream, o.Callers.Audience, o.Authorization = e.iss.KubeconfigFile(), up.URL, aud, proxy.AuthorizationRBAC
	c, err := o.Complete()
	if err != nil {
		return fail(r, err)
	}
	s, err := proxy.New(c)
	if err != nil {
		return fail(r, err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return fail(r, err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	hs.StartTLS()
	defer hs.Close()
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(e.iss.KubeconfigFile()), devissuer.FileCA))
	if err != nil {
		return fail(r, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	get := func(sa string) (int, string, error) {
		tok, err := e.mintFor(devissuer.TokenRequest{Namespace: "demo", ServiceAccount: sa, Audiences: []string{aud}})
		if err != nil {
			return 0, "", err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/hello", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var who string
		if json.Unmarshal(b, &who) == nil {
			return resp.StatusCode, who, nil
		}
		return resp.StatusCode, string(b), nil
	}
	code, body, err := get("client")
	if err != nil {
		return fail(r, err)
	}
	icode, ibody, err := get("intruder")
	if err != nil {
		return fail(r, err)
	}
	var refusal struct{ Reason string }
	_ = json.Unmarshal([]byte(ibody), &refusal)
	// A token sent twice: its first call reviews it (TokenReview and
	// SubjectAccessReview), its second is answered from the proxy's caches.
	tok, err := e.mintFor(devissuer.TokenRequest{Namespace: "demo", ServiceAccount: "client", Audiences: []string{aud}})
	if err != nil {
		return fail(r, err)
	}
	again := func() (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/hello", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if _, err := again(); err != nil {
		return fail(r, err)
	}
	trs, sars := e.iss.Reviews(), e.iss.AccessReviews()
	code2, err := again()
	if err != nil {
		return fail(r, err)
	}
	dtr, dsar := e.iss.Reviews()-trs, e.iss.AccessReviews()-sars
	// An upgrade is judged like any request: never a tunnel past the
	// proxy unless --allow-websocket says so.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/hello", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := hc.Do(req)
	if err != nil {
		return fail(r, err)
	}
	var upgrade struct{ Reason string }
	_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&upgrade)
	_ = resp.Body.Close()
	r.Observed = fmt.Sprintf("client: %d as %s; intruder: %d %s; again: %d, %d TokenReviews, %d SubjectAccessReviews; upgrade: %d %s",
		code, body, icode, refusal.Reason, code2, dtr, dsar, resp.StatusCode, upgrade.Reason)
	r.Pass = code == http.StatusOK && body == client && icode == http.StatusForbidden && refusal.Reason == "rbac_denied" &&
		code2 == http.StatusOK && dtr == 0 && dsar == 0 && resp.StatusCode == http.StatusBadRequest && upgrade.Reason == "bad_request"
	return r
}
