package benchcompare

// callerauth-proxy beside net/http/httputil's bare ReverseProxy (cmd/bare-proxy)
// in front of the same upstream (cmd/empty-server): what authenticating and
// authorizing every request costs a proxy, as ratios.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/proc"
	"github.com/callerauth/callerauth/internal/tools/loadgen"
)

// ProxyTarget is the issue's goal: callerauth-proxy at most 1.10× the bare
// proxy's cost — its throughput at least 1/1.10 of the bare one's, its p99
// and its CPU per request at most 1.10×.
const ProxyTarget = 1.10

// ProxyPeers are the two proxies and what they share.
type ProxyPeers struct {
	Ours, Bare *Server
	// OursMetrics is callerauth-proxy's metrics listener (host:port).
	OursMetrics string
	Token       string
	roots       *x509.CertPool
	stop        func()
}

// Close stops every process.
func (p *ProxyPeers) Close() { p.stop() }

// StartProxies starts, under dir: a dev issuer (TokenReview), the empty
// upstream, callerauth-proxy (TLS, TokenReview with its verdict cache, one
// account allowed) and the bare proxy (TLS, nothing else), both in front
// of that upstream.
func StartProxies(ctx context.Context, dir, proxyBin, bareBin, emptyBin string) (*ProxyPeers, error) {
	var servers []*Server
	var stops []func()
	p := &ProxyPeers{stop: func() {
		for _, s := range servers {
			s.Stop()
		}
		for _, f := range stops {
			f()
		}
	}}
	fail := func(err error) (*ProxyPeers, error) { p.Close(); return nil, err }
	iss, err := devissuer.Open(filepath.Join(dir, "proxy-issuer"), devissuer.Config{})
	if err != nil {
		return nil, err
	}
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { _ = srv.Close() })
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "bench", ServiceAccount: "client", Audiences: []string{"bench-upstream"}, Lifetime: time.Hour})
	if err != nil {
		return fail(err)
	}
	p.Token = tok.Token
	cert, key, err := iss.IssueServingCert(filepath.Join(dir, "proxy-tls"), "127.0.0.1")
	if err != nil {
		return fail(err)
	}
	pem, err := os.ReadFile(iss.CAFile())
	if err != nil {
		return fail(err)
	}
	p.roots = x509.NewCertPool()
	p.roots.AppendCertsFromPEM(pem)
	upAddr, err := loopback.Addr()
	if err != nil {
		return fail(err)
	}
	up, err := start(ctx, "empty upstream", emptyBin, upAddr, "/", "--listen", upAddr)
	if err != nil {
		return fail(err)
	}
	servers = append(servers, up)
	addr, err := loopback.Addr()
	if err != nil {
		return fail(err)
	}
	metrics, err := loopback.Addr()
	if err != nil {
		return fail(err)
	}
	ours, err := start(ctx, "callerauth-proxy", proxyBin, metrics, "/readyz", "--listen", addr, "--metrics-listen", metrics,
		"--tls-cert-file", cert, "--tls-key-file", key, "--kubeconfig", iss.KubeconfigFile(), "--upstream", up.URL,
		"--caller-audience", "bench-upstream", "--allow-service-account", "bench:client", "--log-level", "error")
	if err != nil {
		return fail(err)
	}
	ours.URL, p.OursMetrics = "https://"+addr, metrics
	servers = append(servers, ours)
	p.Ours = ours
	if addr, err = loopback.Addr(); err != nil {
		return fail(err)
	}
	bare := &Server{Name: "bare ReverseProxy", URL: "https://" + addr}
	if bare.proc, err = proc.Start(proc.Spec{Bin: bareBin, Args: []string{"--listen", addr, "--upstream", up.URL, "--tls-cert-file", cert, "--tls-key-file", key}}); err != nil {
		return fail(fmt.Errorf("benchcompare: %w", err))
	}
	servers = append(servers, bare)
	p.Bare = bare
	c := p.client(1)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := c.Get(bare.URL + "/")
		if err == nil {
			_ = resp.Body.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(fmt.Errorf("benchcompare: the bare proxy did not answer: %w: %s", err, bare.proc.Output()))
		}
	}
	return p, nil
}

// client is a keep-alive HTTPS client trusting the proxies' certificate,
// holding conns connections.
func (p *ProxyPeers) client(conns int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: p.roots, MinVersion: tls.VersionTLS12},
		MaxIdleConns:    2 * conns, MaxIdleConnsPerHost: conns,
	}}
}

// ProxyLoads drives both proxies at each number of connections, in turn,
// GET through each to the upstream; every answer must be the upstream's.
// Decisions holds the connections, for ProxyRows.
func ProxyLoads(ctx context.Context, p *ProxyPeers, conns []int, d time.Duration, rounds int) ([]Load, error) {
	var loads []Load
	var cfgs []loadgen.Config
	for _, c := range conns {
		for _, r := range []struct {
			name, role string
			s          *Server
			h          http.Header
		}{
			{fmt.Sprintf("callerauth-proxy at %d connections", c), "proxy", p.Ours, http.Header{"Authorization": {"Bearer " + p.Token}}},
			{fmt.Sprintf("bare ReverseProxy at %d connections", c), "bare", p.Bare, http.Header{}},
		} {
			loads = append(loads, Load{Name: r.name, Role: r.role, Decisions: c, server: r.s})
			cfgs = append(cfgs, loadgen.Config{URL: r.s.URL + "/metrics", Header: r.h, Connections: c, Client: p.client(c), Check: upstreamAnswered})
		}
	}
	return interleaved(ctx, loads, cfgs, d, rounds)
}

// upstreamAnswered checks that an answer through a proxy is the empty
// upstream's.
func upstreamAnswered(status int, body []byte) error {
	if status != http.StatusOK || !bytes.Equal(body, []byte(`{"allow":true}`)) {
		return fmt.Errorf("through the proxy: %d %.200s", status, body)
	}
	return nil
}

// Through asks the upstream once through callerauth-proxy with the token
// and once without it: the first must be the upstream's answer, the
// second refused (401).
func (p *ProxyPeers) Through(ctx context.Context) error {
	c := p.client(1)
	for _, tok := range []string{p.Token, ""} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.Ours.URL+"/metrics", nil)
		if err != nil {
			return err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("through callerauth-proxy: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
		switch {
		case err != nil:
			return fmt.Errorf("through callerauth-proxy: %w", err)
		case tok == "" && resp.StatusCode != http.StatusUnauthorized:
			return fmt.Errorf("through callerauth-proxy without a token: %d %.200s, want 401", resp.StatusCode, body)
		case tok != "":
			if err := upstreamAnswered(resp.StatusCode, body); err != nil {
				return err
			}
		}
	}
	return nil
}

// ProxyRows compare callerauth-proxy with the bare proxy at each
// concurrency: throughput (target ≥ 1/1.10), p99 and the proxy process's
// own CPU per request (targets ≤ 1.10×).
func ProxyRows(loads []Load) []Row {
	byConns := map[int]map[string]Load{}
	var order []int
	for _, l := range loads {
		if byConns[l.Decisions] == nil {
			byConns[l.Decisions] = map[string]Load{}
			order = append(order, l.Decisions)
		}
		byConns[l.Decisions][l.Role] = l
	}
	var rows []Row
	for _, c := range order {
		ours, ok1 := byConns[c]["proxy"]
		bare, ok2 := byConns[c]["bare"]
		if !ok1 || !ok2 {
			continue
		}
		tput := func(l Load) string {
			return fmt.Sprintf("%.0f/s, p50 %s, p99 %s", l.Result.PerSecond(), l.Result.P50.Round(10*time.Microsecond), l.Result.P99.Round(10*time.Microsecond))
		}
		cpu := func(l Load) string {
			return fmt.Sprintf("%.1f µs CPU a request", float64(l.CPUPerRequest)/float64(time.Microsecond))
		}
		name := fmt.Sprintf("callerauth-proxy (TokenReview, cached) vs the bare ReverseProxy, %d connections: ", c)
		rows = append(rows,
			loadSpread(Row{Name: name + "throughput", Ours: tput(ours), Base: tput(bare), Ratio: ours.Result.PerSecond() / bare.Result.PerSecond(), Throughput: true, Target: 1 / ProxyTarget}, ours, bare, perSecond),
			loadSpread(Row{Name: name + "p99 latency", Ours: ours.Result.P99.Round(10 * time.Microsecond).String(), Base: bare.Result.P99.Round(10 * time.Microsecond).String(),
				Ratio: float64(ours.Result.P99) / float64(max(1, bare.Result.P99)), Target: ProxyTarget}, ours, bare, p99),
			loadSpread(Row{Name: name + "proxy CPU per request", Ours: cpu(ours), Base: cpu(bare), Ratio: float64(ours.CPUPerRequest) / float64(max(1, bare.CPUPerRequest)), Target: ProxyTarget}, ours, bare, cpuPer))
	}
	return rows
}
