package callers_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/scrape"
)

// TestValidate: each setting that cannot be honoured is refused, naming
// its flag; the defaults are accepted.
func TestValidate(t *testing.T) {
	defaults := callers.NewOptions()
	defaults.Audience = "svc" // a service's own: NewOptions has none
	if _, err := defaults.Complete(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tt := range []struct {
		edit func(*callers.Options)
		want string
	}{
		{func(o *callers.Options) { o.Backend = "oidc" }, "needs --caller-authentication-config"},
		{func(o *callers.Options) { o.AuthenticationConfig = "f" }, "belongs to --caller-backend oidc"},
		{func(o *callers.Options) { o.Backend, o.AuthenticationConfig, o.Kubeconfig = "oidc", "f", "k" }, "--kubeconfig belongs to --caller-backend tokenreview"},
		{func(o *callers.Options) { o.Backend = "x509" }, `--caller-backend "x509"`},
		{func(o *callers.Options) {
			o.Backend, o.AuthenticationConfig, o.ReviewInterval = "oidc", "f", time.Minute
		}, "--caller-review-interval belongs to --caller-backend tokenreview"},
		{func(o *callers.Options) { o.ReviewInterval = -time.Minute }, "--caller-review-interval -1m0s"},
		{func(o *callers.Options) { o.Backend, o.AuthenticationConfig, o.WatchBoundObjects = "oidc", "f", true }, "--caller-watch-bound-objects belongs to --caller-backend tokenreview"},
		{func(o *callers.Options) { o.WatchMaxBreak = -time.Second }, "--caller-watch-max-break -1s"},
		{func(o *callers.Options) { o.WatchMaxBreak = 7 * time.Second }, "--caller-watch-max-break 7s: want 8s or more"},
		{func(o *callers.Options) { o.Issuers = []string{"http://x"} }, `--caller-issuer "http://x": want the https://`},
		{func(o *callers.Options) { o.MaxInFlight = 0 }, "--caller-max-in-flight 0: want a positive number"},
		{func(o *callers.Options) { o.ReviewQPS = -1 }, "--caller-review-qps -1: want a positive number"},
		{func(o *callers.Options) { o.CacheMaxEntries = 0 }, "--caller-cache-max-entries 0"},
		{func(o *callers.Options) { o.ReviewBurst = 0 }, "--caller-review-burst 0"},
		// The service's own settings.
		{func(o *callers.Options) { o.Audience = "" }, "--caller-audience is required"},
		{func(o *callers.Options) { o.Audience, o.AnyAudience = "", true }, "--caller-audience is required"}, // TokenReview needs one
		{func(o *callers.Options) { o.Mode = "lenient" }, `--caller-auth-mode "lenient": want enforce, audit (or warn)`},
		{func(o *callers.Options) { o.Mode = "Enforce" }, `--caller-auth-mode "Enforce"`},
		{func(o *callers.Options) { o.Mode = "off" }, "this service always authenticates its callers"},
	} {
		o := defaults
		tt.edit(&o)
		if _, err := o.Complete(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v; want %q", o, err, tt.want)
		}
	}
}

// TestServiceSettings: the service's own settings, completed — warn is
// audit by another name; off only where the service permits it; an empty
// audience only under oidc for a service that takes any its file lists —
// and the flags a service registers for them.
func TestServiceSettings(t *testing.T) {
	o := callers.NewOptions()
	o.Audience, o.Mode = "svc", callers.ModeWarn
	c, err := o.Complete()
	if err != nil || c.Mode() != guard.Audit || c.ModeName() != "warn" || c.Off() || c.Audience() != "svc" {
		t.Fatalf("warn: %v, mode %q (%q), off %v", err, c.Mode(), c.ModeName(), c.Off())
	}
	o.Mode, o.CanBeOff, o.AllowOff, o.Audience = callers.ModeOff, true, true, ""
	if c, err = o.Complete(); err != nil || !c.Off() || c.Mode() != "" {
		t.Fatalf("off, permitted, no audience: %v, off %v", err, c.Off())
	}
	if _, err := callers.New(c, callers.Service{Name: "test", Rule: binding.SystemBinding(nil)}); err == nil {
		t.Error("New built a guard under --caller-auth-mode off")
	}
	o = callers.NewOptions()
	o.Backend, o.AuthenticationConfig, o.AnyAudience = callers.BackendOIDC, "authn.yaml", true
	if _, err := o.Complete(); err != nil {
		t.Errorf("oidc, any audience the file lists: %v", err)
	}
	// The flags: off is a mode only where --insecure-caller-auth-off is
	// registered, and refused without it.
	for _, off := range []bool{false, true} {
		o := callers.NewOptions()
		o.CanBeOff = off
		f := pflag.NewFlagSet("test", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		o.AddServiceFlags(f)
		o.AddFlags(f)
		if err := f.Parse([]string{"--caller-audience", "svc", "--caller-auth-mode", "off"}); err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{false: "this service always authenticates its callers", true: "needs --insecure-caller-auth-off"}[off]
		if _, err := o.Complete(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("off registered %v: %v; want %q", off, err, want)
		}
		if (f.Lookup("insecure-caller-auth-off") != nil) != off {
			t.Errorf("off %v: --insecure-caller-auth-off registered %v", off, !off)
		}
	}
}

// build completes o for audience svc and builds the stack of service
// "test" with svc's rule.
func build(t *testing.T, o callers.Options, svc callers.Service) *callers.Stack {
	t.Helper()
	o.Audience = "svc"
	cfg, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	svc.Name = "test"
	svc.Logger = slog.New(slog.NewTextHandler(&capture.Buffer{}, nil))
	if svc.Registry == nil {
		svc.Registry = prometheus.NewRegistry()
	}
	st, err := callers.New(cfg, svc)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOIDCFileMustListTheAudience: an AuthenticationConfiguration none of
// whose issuers lists the service's audience would refuse every token:
// New refuses it, naming the audience and what the file lists.
func TestOIDCFileMustListTheAudience(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	authnConfig := filepath.Join(t.TempDir(), "authn.yaml")
	doc, _, err := authconfig.Convert(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: []string{"another-service"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(authnConfig, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	o := callers.NewOptions()
	o.Backend, o.AuthenticationConfig, o.Audience = callers.BackendOIDC, authnConfig, "svc"
	cfg, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	_, err = callers.New(cfg, callers.Service{Name: "test", Rule: binding.SystemBinding(map[string]string{"sys": "x"})})
	if err == nil || !strings.Contains(err.Error(), `audience "svc"`) || !strings.Contains(err.Error(), "another-service") || !strings.Contains(err.Error(), authnConfig) {
		t.Fatalf("a file that lists only another service's audience: %v; want a refusal naming svc, another-service and the file", err)
	}
}

// parse reads args into NewOptions, for a service of audience svc, as a
// service's command line does.
func parse(args ...string) (callers.Options, error) {
	o := callers.NewOptions()
	o.Audience = "svc"
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	o.AddFlags(f)
	return o, f.Parse(args)
}

// TestGuardOnBothBackends wires the same rule through TokenReview and
// through the oidc backend's AuthenticationConfiguration, against one dev
// issuer: the same token gives the same caller, a token for another
// audience is refused by both — under oidc also when the file lists that
// audience too (a file shared by two services): the service's audience
// holds on every backend.
func TestGuardOnBothBackends(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{})
	authnConfig := filepath.Join(t.TempDir(), "authn.yaml")
	doc, _, err := authconfig.Convert(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: []string{"svc", "another-service"}}}})
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
	kube := func(edit func(*callers.Options)) callers.Options {
		o := callers.NewOptions()
		o.Kubeconfig, o.Audience = iss.KubeconfigFile(), "svc"
		edit(&o)
		return o
	}
	for name, a := range map[string]callers.Options{
		"tokenreview": kube(func(*callers.Options) {}),
		// The issuers as an AuthenticationConfiguration, followed on change.
		"oidc on an AuthenticationConfiguration": func() callers.Options {
			o := callers.NewOptions()
			o.Backend, o.AuthenticationConfig = callers.BackendOIDC, authnConfig
			return o
		}(),
		// TokenReview once per credential per interval, offline between.
		"tokenreview with a review interval": kube(func(o *callers.Options) { o.Issuers, o.ReviewInterval = []string{iss.Issuer()}, time.Hour }),
		// Offline beside a watch of bound objects (this token is bound to
		// none: reviewed), alone and with the interval.
		"tokenreview watching bound objects": kube(func(o *callers.Options) { o.Issuers, o.WatchBoundObjects = []string{iss.Issuer()}, true }),
		"tokenreview watching, with an interval": kube(func(o *callers.Options) {
			o.Issuers, o.WatchBoundObjects, o.ReviewInterval = []string{iss.Issuer()}, true, time.Hour
		}),
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			st := build(t, a, callers.Service{Rule: rule, Registry: reg})
			g := st.Guard
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
			if want := map[bool]int{true: 1}[followed || a.WatchBoundObjects]; len(st.Runnables) != want {
				t.Errorf("%d runnables %v; want %d", len(st.Runnables), st.Runnables, want)
			}
			// What Build registered is what it returned.
			unregistered := prometheus.NewRegistry()
			for _, c := range st.Collectors {
				if err := unregistered.Register(c); err != nil {
					t.Fatal(err)
				}
			}
			if mfs2, _ := unregistered.Gather(); len(mfs2) != len(mfs) {
				t.Errorf("Collectors gather %d families, the registry %d", len(mfs2), len(mfs))
			}
		})
	}
	// With the interval, a new token is reviewed once however often the
	// verdict cache misses it (TTL below: every check misses).
	g := build(t, kube(func(o *callers.Options) {
		o.Issuers, o.ReviewInterval, o.CacheTTL = []string{iss.Issuer()}, time.Hour, time.Nanosecond
	}),
		callers.Service{Rule: rule}).Guard
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
	o := callers.NewOptions()
	o.Kubeconfig, o.Issuers, o.WatchBoundObjects, o.CacheTTL, o.NegativeCacheTTL = iss.KubeconfigFile(), []string{iss.Issuer()}, true, time.Nanosecond, 0
	o.WatchNode = "node-a"
	reg := prometheus.NewRegistry()
	st := build(t, o, callers.Service{Rule: rule, Registry: reg})
	g := st.Guard
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
	if len(st.Runnables) != 1 || st.Runnables[0].String() != "bound-object watches" {
		t.Fatalf("runnables %v; want the bound-object watches", st.Runnables)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Runnables[0].Start(ctx) }()
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
// negative TTL is refused.
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
		a, err := parse(append(c.args, "--kubeconfig", iss.KubeconfigFile())...)
		if err != nil {
			t.Fatal(err)
		}
		g := build(t, a, callers.Service{Rule: rule}).Guard
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
	a, err := parse("--caller-cache-ttl", "-1s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Complete(); err == nil || !strings.Contains(err.Error(), "--caller-cache-ttl -1s: want zero (off) or a positive duration") {
		t.Fatalf("a negative TTL: %v", err)
	}
}

// TestZeroInDurationFlags: zero means off in the duration flags that can
// be off, and is refused, naming the flag, in those that cannot; a negative
// duration is refused everywhere.
func TestZeroInDurationFlags(t *testing.T) {
	complete := func(args ...string) (callers.Options, error) {
		o, err := parse(args...)
		if err != nil {
			return o, err
		}
		_, err = o.Complete()
		return o, err
	}
	for _, name := range []string{"caller-cache-ttl", "caller-negative-cache-ttl", "caller-review-interval"} {
		if _, err := complete("--"+name, "0"); err != nil {
			t.Errorf("--%s 0: %v", name, err)
		}
		if _, err := complete("--"+name, "-1s"); err == nil || !strings.Contains(err.Error(), "--"+name+" -1s: want zero (off) or a positive duration") {
			t.Errorf("--%s -1s: %v", name, err)
		}
	}
	for _, name := range []string{"caller-review-timeout", "caller-watch-max-break", "caller-keys-max-stale"} {
		for _, v := range []string{"0", "-1s"} {
			// The flag is given with what reads it, so that only its value
			// is wrong.
			if _, err := complete("--caller-watch-bound-objects", "--"+name, v); err == nil || !strings.Contains(err.Error(), "--"+name) || !strings.Contains(err.Error(), "want a positive duration") {
				t.Errorf("--%s %s: %v", name, v, err)
			}
		}
	}
}

// TestFlagsNeverRead: a caller-authentication flag given on the command
// line that the settings chosen never read is refused, naming it and what
// reads it; one they read, or one left at its default, is not.
func TestFlagsNeverRead(t *testing.T) {
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
		{[]string{"--caller-authentication-config", "f"}, "--caller-authentication-config belongs to --caller-backend oidc"},
		{[]string{"--kubeconfig", "k", "--caller-backend", "oidc", "--caller-authentication-config", "f"}, "--kubeconfig belongs to --caller-backend tokenreview"},
		{[]string{"--caller-review-qps", "0"}, "--caller-review-qps 0: want a positive number"},
	} {
		a, err := parse(c.args...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Complete()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v; want %q", c.args, err, c.want)
		}
	}
}

// TestRolesOverTokenReview: TokenReview states no roles, so binding.Roles
// over it — directly, or behind the periodic review or the bound-object
// view — is refused when the guard is built, naming the rule and the
// backend; with RoleConfig.Grants mapping service accounts, groups or
// usernames to roles it passes whom they name and refuses role_missing to
// the others. A tenant required of TokenReview is refused the same way.
func TestRolesOverTokenReview(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	required := map[string]string{"GetJob": "reader"}
	options := func(edit func(*callers.Options)) callers.Config {
		o := callers.NewOptions()
		o.Kubeconfig, o.Audience = iss.KubeconfigFile(), "svc"
		edit(&o)
		c, err := o.Complete()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	spec := func(rule binding.Rule) callers.Service {
		return callers.Service{Name: "test", Rule: rule, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	for name, c := range map[string]callers.Config{
		"tokenreview":                  options(func(*callers.Options) {}),
		"tokenreview with an interval": options(func(o *callers.Options) { o.Issuers, o.ReviewInterval = []string{iss.Issuer()}, time.Hour }),
		"tokenreview watching":         options(func(o *callers.Options) { o.Issuers, o.WatchBoundObjects = []string{iss.Issuer()}, true }),
	} {
		_, err := callers.New(c, spec(binding.Roles(binding.RoleConfig{Required: required})))
		if err == nil || !strings.Contains(err.Error(), "binding.Roles checks the caller's roles") || !strings.Contains(err.Error(), "TokenReview states no roles") ||
			!strings.Contains(err.Error(), "RoleConfig.Grants") {
			t.Errorf("%s: roles without grants: %v", name, err)
		}
		_, err = callers.New(c, spec(binding.All(binding.SystemBinding(nil), binding.Roles(binding.RoleConfig{Required: required, RequireTenant: true,
			Grants: []binding.RoleGrant{{Role: "reader", Groups: []string{"system:serviceaccounts:ns"}}}}))))
		if err == nil || !strings.Contains(err.Error(), "TokenReview states no tenant") || strings.Contains(err.Error(), "no roles") {
			t.Errorf("%s: a tenant required (inside All): %v", name, err)
		}
	}
	if _, err := callers.New(options(func(*callers.Options) {}), spec(binding.Roles(binding.RoleConfig{Required: required,
		Grants: []binding.RoleGrant{{Role: "reader"}, {Role: "reader", ServiceAccounts: []string{"ns"}}}}))); err == nil ||
		!strings.Contains(err.Error(), "Grants[0] (reader) names no caller") || !strings.Contains(err.Error(), `service account "ns": want namespace:name`) {
		t.Errorf("grants that cannot be honoured: %v", err)
	}

	st, err := callers.New(options(func(*callers.Options) {}), spec(binding.Roles(binding.RoleConfig{Required: required, Grants: []binding.RoleGrant{
		{Role: "reader", ServiceAccounts: []string{"ns:caller"}},
		{Role: "reader", Groups: []string{"system:serviceaccounts:team"}},
	}})))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ns, sa, want string }{{"ns", "caller", ""}, {"team", "anyone", ""}, {"ns", "other", "role_missing"}} {
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: c.ns, ServiceAccount: c.sa, Audiences: []string{"svc"}})
		if err != nil {
			t.Fatal(err)
		}
		v := st.Guard.Check(context.Background(), bearer.Parse([]string{"Bearer " + tok.Token}), binding.Request{Method: "/vmafx.v1.JobService/GetJob"})
		if got := v.Reason.String(); v.Allowed != (c.want == "") || got != c.want {
			t.Errorf("%s:%s: allowed %v, reason %q; want %q", c.ns, c.sa, v.Allowed, got, c.want)
		}
	}
}
