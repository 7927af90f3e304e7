package serve

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/foundation/version"
	"github.com/callerauth/callerauth/internal/kit/capture"
)

// untilDone runs until its context ends.
func untilDone(stopped *bool) Runnable {
	return RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		*stopped = true
		return nil
	})
}

func TestRun(t *testing.T) {
	t.Run("a failing runnable stops the others and is the error", func(t *testing.T) {
		var stopped bool
		boom := errors.New("listener died")
		err := runAll(context.Background(), untilDone(&stopped), RunnableFunc(func(context.Context) error { return boom }))
		if !errors.Is(err, boom) || !stopped {
			t.Fatalf("Run = %v, other stopped %v", err, stopped)
		}
	})
	t.Run("a runnable that returns by itself is a failure", func(t *testing.T) {
		var stopped bool
		err := runAll(context.Background(), untilDone(&stopped), Named("reload loop", RunnableFunc(func(context.Context) error { return nil })))
		if err == nil || !strings.Contains(err.Error(), "reload loop stopped on its own") || !stopped {
			t.Fatalf("Run = %v, other stopped %v", err, stopped)
		}
	})
	t.Run("the context ending is a clean stop", func(t *testing.T) {
		var a, b bool
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		if err := runAll(ctx, untilDone(&a), untilDone(&b)); err != nil || !a || !b {
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
	r, err := newCertReloader(cert, key, time.Nanosecond, slog.New(slog.NewJSONHandler(&log, nil)))
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
	if _, err := newCertReloader(filepath.Join(dir, "none.crt"), key, 0, nil); err == nil || !strings.Contains(err.Error(), "--tls-cert-file") {
		t.Fatalf("a missing pair at start-up: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	o := NewOptions("", "")
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"cert without key", func(o *Options) { o.TLSCertFile = "c" }, "go together"},
		{"zero shutdown", func(o *Options) { o.ShutdownTimeout = 0 }, "--shutdown-timeout 0s"},
		{"header timeout over read timeout", func(o *Options) { o.HTTP.ReadHeaderTimeout = time.Minute }, "longer than --http-read-timeout"},
		{"negative idle", func(o *Options) { o.HTTP.IdleTimeout = -1 }, "--http-idle-timeout"},
		{"profiling without the metrics listener", func(o *Options) { o.Profiling = true }, "--profiling serves on --metrics-listen"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions("", "")
			tt.edit(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestProfiling: --profiling adds Go's profiles to the metrics listener,
// which serves none without it.
func TestProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		o := NewOptions("", "127.0.0.1:0")
		o.Profiling = on
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		srv, err := o.metricsServer(newHealth())
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

// TestExecuteNamesTheCommandOnce: an error that already names the command
// is printed as it is ("pdp: serve: …"), another gets the name once.
func TestExecuteNamesTheCommandOnce(t *testing.T) {
	for _, c := range []struct{ err, want string }{
		{"pdp: serve: --listen: address in use", "pdp: serve: --listen: address in use\n"},
		{"open x: no such file", "pdp: open x: no such file\n"},
	} {
		cmd := &cobra.Command{Use: "pdp", SilenceErrors: true, SilenceUsage: true, RunE: func(*cobra.Command, []string) error { return errors.New(c.err) }}
		var out bytes.Buffer
		if code := Execute(context.Background(), cmd, nil, &out); code != 1 || out.String() != c.want {
			t.Errorf("%q: exit %d, printed %q; want 1, %q", c.err, code, out.String(), c.want)
		}
	}
}

// TestCommandVersion: every service's command answers --version with the
// build and exits 0 without building the service.
func TestCommandVersion(t *testing.T) {
	built := false
	o := NewOptions("", "")
	cmd := Command(&cobra.Command{Use: "svc"}, &o, io.Discard, func(*cobra.Command) (Service, error) {
		built = true
		return nil, errors.New("not here")
	})
	var out bytes.Buffer
	cmd.SetOut(&out)
	if code := Execute(context.Background(), cmd, []string{"--version"}, io.Discard); code != 0 || built || !strings.HasPrefix(out.String(), "svc version ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("--version: exit %d, built %t, printed %q", code, built, out.String())
	}
}

// TestRemovedFormats: the JSON issuers file is gone; its flag stops the
// process saying what to do instead.
func TestRemovedFormats(t *testing.T) {
	o := callers.NewOptions()
	f := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	AddCallerFlags(f, &o)
	err := f.Parse([]string{"--caller-oidc-issuers", "issuers.json"})
	if err == nil || !strings.Contains(err.Error(), "was removed: callerauth config convert FILE") || !strings.Contains(err.Error(), "--caller-authentication-config") {
		t.Fatalf("--caller-oidc-issuers: %v", err)
	}
}

// TestBuildInfo: the gauge is 1, labelled with the build.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(BuildInfo("x"))
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "x_build_info" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("x_build_info: %v %v", mfs, err)
	}
	labels := map[string]string{}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if i := version.Get(); labels["version"] != i.Version || labels["goversion"] != i.Go {
		t.Fatalf("labels %v; want the build's %+v", labels, i)
	}
}

// TestTheAPIServesAfterItsGates: the API's listener serves nothing while a
// gate is closed — a request sent then waits, unhandled, and /readyz says
// what is awaited — and serves once it opens; /readyz is then ready.
func TestTheAPIServesAfterItsGates(t *testing.T) {
	o := NewOptions("", "127.0.0.1:0")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := New("svc", o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Bool
	m.Gate("the bound-object view", open.Load)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	m.ServeHTTP("api", lis, nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { handled.Add(1); _, _ = io.WriteString(w, "ok") }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		m.Health().Readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + lis.Addr().String() + "/")
		if err == nil {
			_ = resp.Body.Close()
		}
		answered <- err
	}()
	// The request is on its way (or waiting in the listener's queue); the
	// gate is closed, so nothing serves it.
	for range 20 {
		if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the bound-object view") {
			t.Fatalf("/readyz with the gate closed: %d %q", code, body)
		}
		if n := handled.Load(); n != 0 {
			t.Fatalf("%d requests handled with the gate closed", n)
		}
		runtime.Gosched()
	}
	open.Store(true)
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request was not answered after the gate opened")
	}
	if handled.Load() != 1 {
		t.Fatalf("handled %d", handled.Load())
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz once serving: %d %q", code, body)
	}
}

// TestStopOrder: when the process is told to stop with a request in
// flight, the API server drains it while every other runnable still runs
// (a decision log the request writes to, say); the other runnables are
// asked to stop only once the server has returned, and the metrics
// listener, answering /readyz throughout, last.
func TestStopOrder(t *testing.T) {
	o := NewOptions("", "127.0.0.1:0")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := New("svc", o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	// The log: it takes writes until its context ends.
	var logStopped atomic.Bool
	m.Add(Named("the log", RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		note("the log asked to stop")
		logStopped.Store(true)
		return nil
	})))
	inFlight, release := make(chan struct{}), make(chan struct{})
	m.ServeHTTP("api", lis, nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(inFlight)
		<-release
		if logStopped.Load() {
			http.Error(w, "the log stopped under me", http.StatusServiceUnavailable)
			return
		}
		note("the request answered")
		_, _ = io.WriteString(w, "kept")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + lis.Addr().String() + "/")
		if err != nil {
			answered <- 0
			return
		}
		_ = resp.Body.Close()
		answered <- resp.StatusCode
	}()
	<-inFlight
	cancel()
	// The server drains: the log must still run, and does for as long as
	// the request takes.
	time.Sleep(50 * time.Millisecond)
	if logStopped.Load() {
		t.Fatal("the log was asked to stop while a request was in flight")
	}
	close(release)
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("the request in flight at the stop: %d", code)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"the request answered", "the log asked to stop"}; !slices.Equal(events, want) {
		t.Errorf("stop order %q, want %q", events, want)
	}
}

// TestRunInOrder: each stage is asked to stop only once the one before
// has returned, on the context's end and on a failure alike; the failure
// is what comes back.
func TestRunInOrder(t *testing.T) {
	for _, fail := range []bool{false, true} {
		var mu sync.Mutex
		var order []string
		stage := func(name string, failAfter time.Duration) Runnable {
			return Named(name, RunnableFunc(func(ctx context.Context) error {
				if failAfter > 0 {
					time.Sleep(failAfter)
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					return errors.New(name + " failed")
				}
				<-ctx.Done()
				time.Sleep(10 * time.Millisecond) // draining
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				return nil
			}))
		}
		ctx, cancel := context.WithCancel(context.Background())
		var failing time.Duration
		if fail {
			failing = 20 * time.Millisecond
		} else {
			time.AfterFunc(20*time.Millisecond, cancel)
		}
		err := runInOrder(ctx, []Runnable{stage("servers a", 0), stage("servers b", 0)}, []Runnable{stage("log", 0), stage("loop", failing)}, nil, []Runnable{stage("metrics", 0)})
		cancel()
		mu.Lock()
		got := order
		mu.Unlock()
		if fail != (err != nil) {
			t.Errorf("fail %v: %v", fail, err)
		}
		want := []string{"servers", "servers", "log", "metrics"}
		if fail {
			want = []string{"loop", "servers", "servers", "log", "metrics"}
		} else {
			got = slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == "loop" })
		}
		for i := range got {
			got[i] = strings.Fields(got[i])[0]
		}
		if !slices.Equal(got, want) {
			t.Errorf("fail %v: stopped %q, want %q", fail, got, want)
		}
	}
}
