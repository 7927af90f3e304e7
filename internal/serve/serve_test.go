package serve_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/serve"
)

// untilDone runs until its context ends.
func untilDone(stopped *bool) serve.Runnable {
	return serve.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		*stopped = true
		return nil
	})
}

func TestRun(t *testing.T) {
	t.Run("a failing runnable stops the others and is the error", func(t *testing.T) {
		var stopped bool
		boom := errors.New("listener died")
		err := serve.Run(context.Background(), untilDone(&stopped), serve.RunnableFunc(func(context.Context) error { return boom }))
		if !errors.Is(err, boom) || !stopped {
			t.Fatalf("Run = %v, other stopped %v", err, stopped)
		}
	})
	t.Run("a runnable that returns by itself is a failure", func(t *testing.T) {
		var stopped bool
		err := serve.Run(context.Background(), untilDone(&stopped), serve.Named("reload loop", serve.RunnableFunc(func(context.Context) error { return nil })))
		if err == nil || !strings.Contains(err.Error(), "reload loop stopped on its own") || !stopped {
			t.Fatalf("Run = %v, other stopped %v", err, stopped)
		}
	})
	t.Run("the context ending is a clean stop", func(t *testing.T) {
		var a, b bool
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		if err := serve.Run(ctx, untilDone(&a), untilDone(&b)); err != nil || !a || !b {
			t.Fatalf("Run = %v, stopped %v %v", err, a, b)
		}
	})
}

// TestCertReloaderKeepsAGoodPair: a pair that does not load (the new
// certificate written, the old key still there) keeps the previous one
// serving, said once; the matching key then brings the new one in.
func TestCertReloaderKeepsAGoodPair(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1, _ := ca.Issue("a", "127.0.0.1")
	_ = os.WriteFile(cert, c1, 0o600)
	_ = os.WriteFile(key, k1, 0o600)
	var log capture.Buffer
	r, err := serve.NewCertReloader(cert, key, time.Nanosecond, slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	first := r.Certificate().Leaf.SerialNumber
	c2, k2, _ := ca.Issue("b", "127.0.0.1")
	time.Sleep(10 * time.Millisecond) // a new mtime
	_ = os.WriteFile(cert, c2, 0o600)
	for range 3 {
		if got := r.Certificate().Leaf.SerialNumber; got.Cmp(first) != 0 {
			t.Fatalf("a half-written pair replaced the good one: %v", got)
		}
	}
	if n := strings.Count(log.String(), "do not load"); n != 1 {
		t.Fatalf("the bad pair was reported %d times:\n%s", n, log.String())
	}
	_ = os.WriteFile(key, k2, 0o600)
	if got := r.Certificate().Leaf.SerialNumber; got.Cmp(first) == 0 {
		t.Fatal("the completed pair was not picked up")
	}
	if _, err := serve.NewCertReloader(filepath.Join(dir, "none.crt"), key, 0, nil); err == nil || !strings.Contains(err.Error(), "--tls-cert-file") {
		t.Fatalf("a missing pair at start-up: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	o := serve.Options{}
	o.Defaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func(*serve.Options)
		want string
	}{
		{"cert without key", func(o *serve.Options) { o.TLSCertFile = "c" }, "go together"},
		{"zero shutdown", func(o *serve.Options) { o.ShutdownTimeout = 0 }, "--shutdown-timeout 0s"},
		{"header timeout over read timeout", func(o *serve.Options) { o.HTTP.ReadHeaderTimeout = time.Minute }, "longer than --http-read-timeout"},
		{"negative idle", func(o *serve.Options) { o.HTTP.IdleTimeout = -1 }, "--http-idle-timeout"},
		{"profiling without the metrics listener", func(o *serve.Options) { o.Profiling = true }, "--profiling serves on --metrics-listen"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := serve.Options{}
			o.Defaults()
			tt.edit(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v; want %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		a    serve.AuthOptions
		want string
	}{
		{serve.AuthOptions{Backend: "oidc"}, "needs --caller-authentication-config"},
		{serve.AuthOptions{Backend: "tokenreview", AuthenticationConfig: "f"}, "belongs to --caller-backend oidc"},
		{serve.AuthOptions{Backend: "oidc", AuthenticationConfig: "f", Kubeconfig: "k"}, "--kubeconfig belongs to --caller-backend tokenreview"},
		{serve.AuthOptions{Backend: "x509"}, `--caller-backend "x509"`},
		{serve.AuthOptions{Backend: "oidc", AuthenticationConfig: "f", ReviewInterval: time.Minute}, "--caller-review-interval belongs to --caller-backend tokenreview"},
		{serve.AuthOptions{Backend: "tokenreview", ReviewInterval: -time.Minute}, "--caller-review-interval -1m0s"},
		{serve.AuthOptions{Backend: "oidc", AuthenticationConfig: "f", WatchBoundObjects: true}, "--caller-watch-bound-objects belongs to --caller-backend tokenreview"},
		{serve.AuthOptions{Backend: "tokenreview", WatchMaxBreak: -time.Second}, "--caller-watch-max-break -1s"},
		{serve.AuthOptions{Backend: "tokenreview", WatchMaxBreak: 7 * time.Second}, "--caller-watch-max-break 7s: want 8s or more"},
	} {
		if err := tt.a.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v; want %q", tt.a, err, tt.want)
		}
	}
}

// TestProfiling: --profiling adds Go's profiles to the metrics listener,
// which serves none without it.
func TestProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		o := serve.Options{MetricsListen: "127.0.0.1:0", Profiling: on}
		o.Defaults()
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		srv, err := o.MetricsServer(serve.NewHealth())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Start(ctx) }()
		base := "http://" + srv.Listener.Addr().String()
		for path, want := range map[string]int{"/metrics": 200, "/debug/pprof/": map[bool]int{false: 404, true: 200}[on], "/debug/pprof/cmdline": map[bool]int{false: 404, true: 200}[on]} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("profiling %t: GET %s = %d, want %d", on, path, resp.StatusCode, want)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestGuardOnBothBackends wires the same rule through TokenReview and
// through the oidc backend's AuthenticationConfiguration, against one dev
// issuer: the same token gives the same caller, a token for another
// audience is refused by both.
func TestGuardOnBothBackends(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	authnConfig := filepath.Join(t.TempDir(), "authn.yaml")
	doc, _, err := oidc.AuthenticationConfigurationOf(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: []string{"svc"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(authnConfig, doc, 0o600)
	mint := func(aud string) bearer.Credential {
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "caller", Audiences: []string{aud}})
		if err != nil {
			t.Fatal(err)
		}
		return bearer.Parse([]string{"Bearer " + tok.Token})
	}
	good, other := mint("svc"), mint("another-service")
	rule := binding.SystemBinding(map[string]string{"sys": "system:serviceaccount:ns:caller"})
	for name, a := range map[string]serve.AuthOptions{
		"tokenreview": {Backend: serve.BackendTokenReview, Kubeconfig: iss.KubeconfigFile()},
		// The issuers as an AuthenticationConfiguration, followed on change.
		"oidc on an AuthenticationConfiguration": {Backend: serve.BackendOIDC, AuthenticationConfig: authnConfig},
		// TokenReview once per credential per interval, offline between.
		"tokenreview with a review interval": {Backend: serve.BackendTokenReview, Kubeconfig: iss.KubeconfigFile(), Issuers: []string{iss.Issuer()}, ReviewInterval: time.Hour},
		// Offline beside a watch of bound objects (this token is bound to
		// none: reviewed), alone and with the interval.
		"tokenreview watching bound objects":     {Backend: serve.BackendTokenReview, Kubeconfig: iss.KubeconfigFile(), Issuers: []string{iss.Issuer()}, WatchBoundObjects: true},
		"tokenreview watching, with an interval": {Backend: serve.BackendTokenReview, Kubeconfig: iss.KubeconfigFile(), Issuers: []string{iss.Issuer()}, WatchBoundObjects: true, ReviewInterval: time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			g, err := a.Guard(serve.GuardSpec{Audience: "svc", Mode: guard.Enforce, Rule: rule, Registry: reg,
				MetricsPrefix: "test", Logger: slog.New(slog.NewTextHandler(&capture.Buffer{}, nil))})
			if err != nil {
				t.Fatal(err)
			}
			v := g.Check(context.Background(), good, binding.Request{System: "sys"})
			if !v.Allowed || v.Caller.Username != "system:serviceaccount:ns:caller" {
				t.Fatalf("the good token: %+v", v)
			}
			if v := g.Check(context.Background(), other, binding.Request{System: "sys"}); v.Allowed || v.Reason.String() != "token_invalid" {
				t.Fatalf("another audience: %+v", v)
			}
			// Offline verification exports its key sets' metrics.
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, mf := range mfs {
				names[mf.GetName()] = true
			}
			offline := name != "tokenreview"
			for _, m := range []string{"test_caller_jwks_fetches_total", "test_caller_jwks_keys_ignored_total", "test_caller_jwks_stale_refusals_total", "test_caller_jwks_unknown_kid_total",
				"test_caller_jwt_authenticator_latency_seconds", "test_caller_jwt_authenticator_jwks_fetch_last_timestamp_seconds"} {
				if names[m] != offline {
					t.Errorf("%s exported: %v; want %v", m, names[m], offline)
				}
			}
			followed := a.AuthenticationConfig != ""
			for _, m := range []string{"test_caller_config_reloads_total", "test_caller_config_info"} {
				if names[m] != followed {
					t.Errorf("%s exported: %v; want %v", m, names[m], followed)
				}
			}
			if followed && len(g.Runnables()) != 1 {
				t.Errorf("%d runnables; want the configuration's reload", len(g.Runnables()))
			}
		})
	}
	// With the interval, a new token is reviewed once however often the
	// verdict cache misses it (TTL below: every check misses).
	a := serve.AuthOptions{Backend: serve.BackendTokenReview, Kubeconfig: iss.KubeconfigFile(), Issuers: []string{iss.Issuer()}, ReviewInterval: time.Hour, CacheTTL: time.Nanosecond}
	g, err := a.Guard(serve.GuardSpec{Audience: "svc", Mode: guard.Enforce, Rule: rule, Registry: prometheus.NewRegistry(), MetricsPrefix: "test",
		Logger: slog.New(slog.NewTextHandler(&capture.Buffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fresh, before := mint("svc"), iss.Reviews()
	for range 10 {
		if v := g.Check(context.Background(), fresh, binding.Request{System: "sys"}); !v.Allowed {
			t.Fatalf("%+v", v)
		}
		time.Sleep(time.Millisecond)
	}
	if n := iss.Reviews() - before; n != 1 {
		t.Fatalf("%d TokenReviews for 10 checks of one token under --caller-review-interval; want 1", n)
	}
}

// TestGuardWatchingBoundObjects: --caller-watch-bound-objects against the
// dev issuer. Until the service runs the watches its guard hands back,
// every token is reviewed; once they have synced, a pod-bound token is
// accepted with no TokenReview however often the verdict cache misses, and
// refused once its pod is deleted; the view's metrics are exported.
func TestGuardWatchingBoundObjects(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	rule := binding.SystemBinding(map[string]string{"sys": "system:serviceaccount:ns:caller"})
	a := serve.AuthOptions{Backend: serve.BackendTokenReview, Kubeconfig: iss.KubeconfigFile(), Issuers: []string{iss.Issuer()},
		WatchBoundObjects: true, CacheTTL: time.Nanosecond, NegativeCacheTTL: -1}
	reg := prometheus.NewRegistry()
	g, err := a.Guard(serve.GuardSpec{Audience: "svc", Mode: guard.Enforce, Rule: rule, Registry: reg, MetricsPrefix: "test", WatchNode: "node-a",
		Logger: slog.New(slog.NewTextHandler(&capture.Buffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "caller", Audiences: []string{"svc"}, Pod: "p", Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	cred := bearer.Parse([]string{"Bearer " + tok.Token})
	check := func() (*guard.Verdict, int64) {
		before := iss.Reviews()
		v := g.Check(context.Background(), cred, binding.Request{System: "sys"})
		return v, iss.Reviews() - before
	}
	if v, n := check(); !v.Allowed || n != 1 {
		t.Fatalf("before the watches run: %+v, %d TokenReviews; want allowed by one", v, n)
	}
	if len(g.Runnables()) != 1 {
		t.Fatalf("%d runnables; want the bound-object watches", len(g.Runnables()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.Run(ctx, g.Runnables()...) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v, n := check(); v.Allowed && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pod-bound token is still reviewed 10 s after the watches started")
		}
	}
	for range 10 {
		if v, n := check(); !v.Allowed || n != 0 {
			t.Fatalf("%+v, %d TokenReviews; want the view's answer", v, n)
		}
	}
	if err := iss.DeletePod("ns", "p"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, n := check()
		if !v.Allowed && v.Reason.String() == "token_invalid" && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted pod's token 10 s on: %+v, %d TokenReviews", v, n)
		}
	}
	want := map[string]float64{
		`test_caller_bound_answers_total{accepted}`:   -1, // some
		`test_caller_bound_answers_total{gone}`:       -1,
		`test_caller_bound_fallbacks_total{unsynced}`: -1,
		`test_caller_bound_objects{pods}`:             0,
		`test_caller_bound_synced`:                    1,
		`test_caller_bound_answering`:                 1,
		`test_caller_bound_watch_lag_seconds`:         -1, // since the last proof
	}
	got, err := scrape.Values(reg)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok || (v >= 0 && g != v) || (v < 0 && g <= 0) {
			t.Errorf("%s = %v (exported: %v); want %v", k, g, ok, v)
		}
	}
	if _, ok := got["test_caller_jwks_fetches_total{ok}"]; !ok {
		t.Errorf("the offline verifier's key metrics are not exported: %v", got)
	}
}

// TestCacheTTLZero: --caller-cache-ttl 0 reuses no verification — every
// request is reviewed — as its help and the API server's own cache say
// (it used to mean the two-minute default); the default reuses one; a
// negative TTL is refused by the flag.
func TestCacheTTLZero(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "caller", Audiences: []string{"svc"}})
	if err != nil {
		t.Fatal(err)
	}
	cred := bearer.Parse([]string{"Bearer " + tok.Token})
	rule := binding.SystemBinding(map[string]string{"sys": "system:serviceaccount:ns:caller"})
	for _, c := range []struct {
		args []string
		want int64
	}{{[]string{"--caller-cache-ttl", "0"}, 5}, {nil, 1}, {[]string{"--caller-cache-ttl", "1m"}, 1}} {
		var a serve.AuthOptions
		f := pflag.NewFlagSet("test", pflag.ContinueOnError)
		a.AddFlags(f)
		if err := f.Parse(append(c.args, "--kubeconfig", iss.KubeconfigFile())); err != nil {
			t.Fatal(err)
		}
		if err := a.Validate(); err != nil {
			t.Fatal(err)
		}
		g, err := a.Guard(serve.GuardSpec{Audience: "svc", Mode: guard.Enforce, Rule: rule, Registry: prometheus.NewRegistry(), MetricsPrefix: "test",
			Logger: slog.New(slog.NewTextHandler(&capture.Buffer{}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		before := iss.Reviews()
		for range 5 {
			if v := g.Check(context.Background(), cred, binding.Request{System: "sys"}); !v.Allowed {
				t.Fatalf("%v: %+v", c.args, v)
			}
		}
		if n := iss.Reviews() - before; n != c.want {
			t.Errorf("%v: %d TokenReviews for 5 checks of one token; want %d", c.args, n, c.want)
		}
	}
	var a serve.AuthOptions
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	a.AddFlags(f)
	if err := f.Parse([]string{"--caller-cache-ttl", "-1s"}); err == nil || !strings.Contains(err.Error(), "want zero (off) or more") {
		t.Fatalf("a negative TTL: %v", err)
	}
}

// TestZeroInDurationFlags: zero means off in the duration flags that can
// be off, and is refused, naming the flag, in those that cannot; a negative
// duration is refused everywhere.
func TestZeroInDurationFlags(t *testing.T) {
	parse := func(args ...string) (serve.AuthOptions, error) {
		var a serve.AuthOptions
		f := pflag.NewFlagSet("test", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		a.AddFlags(f)
		return a, f.Parse(args)
	}
	for _, name := range []string{"caller-cache-ttl", "caller-negative-cache-ttl"} {
		a, err := parse("--"+name, "0")
		if err != nil {
			t.Fatalf("--%s 0: %v", name, err)
		}
		if v := map[string]time.Duration{"caller-cache-ttl": a.CacheTTL, "caller-negative-cache-ttl": a.NegativeCacheTTL}[name]; v >= 0 {
			t.Errorf("--%s 0 stored %v: not off", name, v)
		}
	}
	if a, err := parse("--caller-review-interval", "0"); err != nil || a.ReviewInterval != 0 {
		t.Errorf("--caller-review-interval 0: %v %v", a.ReviewInterval, err)
	}
	for _, name := range []string{"caller-review-timeout", "caller-watch-max-break", "caller-keys-max-stale"} {
		for _, v := range []string{"0", "-1s"} {
			if _, err := parse("--"+name, v); err == nil || !strings.Contains(err.Error(), "--"+name) || !strings.Contains(err.Error(), "want a positive duration") {
				t.Errorf("--%s %s: %v", name, v, err)
			}
		}
	}
	for _, name := range []string{"caller-cache-ttl", "caller-negative-cache-ttl"} {
		if _, err := parse("--"+name, "-1s"); err == nil || !strings.Contains(err.Error(), "want zero (off) or more") {
			t.Errorf("--%s -1s: %v", name, err)
		}
	}
}

// TestExecuteNamesTheCommandOnce: an error that already names the command
// is printed as it is ("pdp: serve: …"), another gets the name once.
func TestExecuteNamesTheCommandOnce(t *testing.T) {
	for _, c := range []struct{ err, want string }{
		{"pdp: serve: --listen: address in use", "pdp: serve: --listen: address in use\n"},
		{"open x: no such file", "pdp: open x: no such file\n"},
	} {
		cmd := &cobra.Command{Use: "pdp", SilenceErrors: true, SilenceUsage: true, RunE: func(*cobra.Command, []string) error { return errors.New(c.err) }}
		var out bytes.Buffer
		if code := serve.Execute(context.Background(), cmd, nil, &out); code != 1 || out.String() != c.want {
			t.Errorf("%q: exit %d, printed %q; want 1, %q", c.err, code, out.String(), c.want)
		}
	}
}

// TestCommandVersion: every service's command answers --version with the
// build and exits 0 without building the service.
func TestCommandVersion(t *testing.T) {
	built := false
	var o serve.Options
	cmd := serve.Command(&cobra.Command{Use: "svc"}, &o, io.Discard, func(*cobra.Command) (serve.Service, error) {
		built = true
		return nil, errors.New("not here")
	})
	var out bytes.Buffer
	cmd.SetOut(&out)
	if code := serve.Execute(context.Background(), cmd, []string{"--version"}, io.Discard); code != 0 || built || !strings.HasPrefix(out.String(), "svc version ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("--version: exit %d, built %t, printed %q", code, built, out.String())
	}
}

// TestCheckAuthFlags: a caller-authentication flag given on the command
// line that the settings chosen never read is refused, naming it and what
// reads it; one they read, or one left at its default, is not.
func TestCheckAuthFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for accepted
	}{
		{nil, ""},
		{[]string{"--caller-review-qps", "5"}, ""},
		{[]string{"--caller-backend", "oidc", "--caller-authentication-config", "f", "--caller-review-qps", "5"}, "--caller-review-qps is read only with --caller-backend tokenreview"},
		{[]string{"--caller-backend", "oidc", "--caller-authentication-config", "f", "--caller-review-burst", "5"}, "--caller-review-burst is read only with --caller-backend tokenreview"},
		{[]string{"--caller-backend", "oidc", "--caller-authentication-config", "f", "--caller-watch-max-break", "20s"}, "--caller-watch-max-break is read only with --caller-watch-bound-objects"},
		{[]string{"--caller-watch-max-break", "20s"}, "--caller-watch-max-break is read only with --caller-watch-bound-objects"},
		{[]string{"--caller-watch-bound-objects", "--caller-watch-max-break", "20s"}, ""},
		{[]string{"--caller-keys-max-stale", "1h"}, "--caller-keys-max-stale is read only with offline verification"},
		{[]string{"--caller-review-interval", "30m", "--caller-keys-max-stale", "1h"}, ""},
		{[]string{"--caller-backend", "oidc", "--caller-authentication-config", "f", "--caller-keys-max-stale", "1h"}, ""},
		{[]string{"--caller-authentication-config", "f"}, "--caller-authentication-config is read only with --caller-backend oidc"},
	} {
		var a serve.AuthOptions
		f := pflag.NewFlagSet("t", pflag.ContinueOnError)
		a.AddFlags(f)
		if err := f.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := serve.CheckAuthFlags(f)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v; want %q", c.args, err, c.want)
		}
	}
}

// TestRemovedFormats: the JSON issuers file and the vmafx tenants file are
// gone; their flags stop the process saying what to do instead.
func TestRemovedFormats(t *testing.T) {
	var a serve.AuthOptions
	f := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	a.AddFlags(f)
	err := f.Parse([]string{"--caller-oidc-issuers", "issuers.json"})
	if err == nil || !strings.Contains(err.Error(), "was removed: callerauth config convert FILE") || !strings.Contains(err.Error(), "--caller-authentication-config") {
		t.Fatalf("--caller-oidc-issuers: %v", err)
	}
}
