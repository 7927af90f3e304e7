package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/foundation/version"
)

// Options are the serving settings every service shares. Start from
// [NewOptions], which holds every default; a service changes what it
// wants (its --listen) and calls [Options.AddFlags].
type Options struct {
	// Listen is the API's host:port.
	Listen string
	// TLSCertFile and TLSKeyFile are the serving key pair, reloaded when
	// the files change.
	TLSCertFile, TLSKeyFile string
	// CertCheckInterval is how often the key pair's files are looked at.
	CertCheckInterval time.Duration
	// MetricsListen serves /metrics, /healthz and /readyz; empty: off.
	MetricsListen string
	// Profiling also serves Go's profiles (net/http/pprof) under
	// /debug/pprof/ on MetricsListen, as the Kubernetes components'
	// --profiling does. Off by default: a profile shows what the process
	// is doing to anyone who can reach the metrics port.
	Profiling bool
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// ShutdownTimeout is how long the servers drain on SIGTERM.
	ShutdownTimeout time.Duration
	// HTTP bounds every HTTP listener's clients.
	HTTP HTTPLimits
	// LogOutput is where the JSON log goes. Nil: standard error.
	LogOutput io.Writer
	// Tracing is where OpenTelemetry spans go (--otlp-*); off by default.
	Tracing Tracing
}

// NewOptions returns the defaults: listen on listen, metrics on
// metricsListen (empty: off), info, a 10 s shutdown timeout, a 10 s
// certificate check, the default HTTP limits (docs/development.md).
func NewOptions(listen, metricsListen string) Options {
	return Options{Listen: listen, MetricsListen: metricsListen, LogLevel: "info", ShutdownTimeout: defaultShutdownTimeout,
		CertCheckInterval: defaultCertCheckInterval, HTTP: defaultHTTPLimits(), Tracing: Tracing{Protocol: "grpc", SampleRatio: 1}}
}

// For names the binary the options are for: its spans' service.name.
func (o Options) For(binary string) Options {
	o.Tracing.Service = binary
	return o
}

// AddFlags registers the serving flags, with o's values as their
// defaults: --listen, --tls-cert-file, --tls-key-file,
// --tls-check-interval, the --http-* limits, and [Options.AddProcessFlags].
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Listen, "listen", o.Listen, "host:port to serve the API on")
	f.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serving certificate (PEM); re-read when it changes on disk")
	f.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "serving key (PEM); re-read when it changes on disk")
	f.DurationVar(&o.CertCheckInterval, "tls-check-interval", o.CertCheckInterval, "how often the serving key pair's files are checked for a change")
	o.HTTP.AddFlags(f)
	o.AddProcessFlags(f)
}

// AddProcessFlags registers what every process has, a service or an agent
// that serves no API (the vmafx node and operator): --metrics-listen,
// --profiling, --log-level and --shutdown-timeout.
func (o *Options) AddProcessFlags(f *pflag.FlagSet) {
	f.StringVar(&o.MetricsListen, "metrics-listen", o.MetricsListen, "host:port for /metrics, /healthz and /readyz (empty: off)")
	f.BoolVar(&o.Profiling, "profiling", o.Profiling, "also serve Go's profiles under /debug/pprof/ on --metrics-listen")
	f.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	f.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "how long in-flight work may drain on SIGTERM")
	o.Tracing.addFlags(f)
}

// Validate refuses settings that cannot be honoured, naming the flag. It
// does not look at files; the manager does when it loads the pair.
func (o Options) Validate() error {
	var errs []error
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("serve: --log-level %q: want debug, info, warn or error", o.LogLevel))
	}
	if o.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("serve: --shutdown-timeout %s: want a positive duration", o.ShutdownTimeout))
	}
	if o.CertCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("serve: --tls-check-interval %s: want a positive duration", o.CertCheckInterval))
	}
	if o.Profiling && o.MetricsListen == "" {
		errs = append(errs, errors.New("serve: --profiling serves on --metrics-listen, which is off"))
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		errs = append(errs, errors.New("serve: --tls-cert-file and --tls-key-file go together"))
	}
	if err := o.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Tracing.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Logger is a JSON logger at the configured level, writing to w (info
// when the level does not parse: Validate refuses it first).
func (o Options) Logger(w io.Writer) *slog.Logger {
	l, err := newLogger(o.LogLevel, w)
	if err != nil {
		l, _ = newLogger("info", w)
	}
	return l
}

// HasTLS says whether a serving key pair is configured.
func (o Options) HasTLS() bool { return o.TLSCertFile != "" && o.TLSKeyFile != "" }

// loadCerts loads the serving key pair, to be reloaded on change.
func (o Options) loadCerts(log *slog.Logger) (*certReloader, error) {
	return newCertReloader(o.TLSCertFile, o.TLSKeyFile, o.CertCheckInterval, log)
}

// metricsServer listens on MetricsListen and returns the runnable serving
// h there, or nil when MetricsListen is empty.
func (o Options) metricsServer(h *Health) (*httpServer, error) {
	if o.MetricsListen == "" {
		return nil, nil
	}
	lis, err := ListenTCP("--metrics-listen", o.MetricsListen)
	if err != nil {
		return nil, err
	}
	handler := h.Handler()
	if o.Profiling {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		handler = mux
	}
	return &httpServer{Name: "metrics", Listener: o.HTTP.Listener(lis, nil), Server: o.HTTP.server(handler, h.malformedOf("metrics")), ShutdownTimeout: o.ShutdownTimeout}, nil
}

// newLogger is a JSON logger at level (debug, info, warn or error) writing
// to w; an unknown level is an error naming the flag.
func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// Service is what a service's New returns: it runs until its context ends
// or a part of it fails. One that is also an io.Closer is closed after.
type Service interface {
	Run(ctx context.Context) error
}

// Command makes cmd a service's command line, the same for every service:
// no arguments; usage and errors left to [Execute], which prints the error
// once; and a RunE that points the logs at stderr (o.LogOutput), builds
// the service with build — [Complete](&options, New) for a service
// configured the one way — and runs it until the command's context ends.
func Command(cmd *cobra.Command, o *Options, stderr io.Writer, build func(cmd *cobra.Command) (Service, error)) *cobra.Command {
	cmd.Args, cmd.SilenceUsage, cmd.SilenceErrors = cobra.NoArgs, true, true
	// --version prints the build (version, revision, Go) and exits.
	cmd.Version = version.Get().String()
	cmd.RunE = func(cmd *cobra.Command, _ []string) (err error) {
		o.LogOutput = stderr
		s, err := build(cmd)
		if err != nil {
			return err
		}
		if c, ok := s.(io.Closer); ok {
			defer func() { err = errors.Join(err, c.Close()) }()
		}
		return s.Run(cmd.Context())
	}
	return cmd
}

// Execute runs a service's command with args and returns the process exit
// code: 0, or 1 after printing the error after the service's name.
func Execute(ctx context.Context, cmd *cobra.Command, args []string, stderr io.Writer) int {
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		// Errors of the service's own packages already name it: named
		// once ("pdp: serve: …", not "pdp: pdp: serve: …").
		msg := err.Error()
		if !strings.HasPrefix(msg, cmd.Name()+": ") {
			msg = cmd.Name() + ": " + msg
		}
		fmt.Fprintln(stderr, msg)
		return 1
	}
	return 0
}

// AddCallerFlags registers the caller-authentication flags of o
// (callers.Options.AddFlags) and the removed --caller-oidc-issuers.
func AddCallerFlags(f *pflag.FlagSet, o *callers.Options) {
	o.AddFlags(f)
	RemovedFlag(f, "caller-oidc-issuers", "the JSON issuers file")
}

// RemovedFlag registers a flag that no longer exists — a file format
// callerauth read before the AuthenticationConfiguration — so that giving
// it stops the process saying what to do instead of "unknown flag".
func RemovedFlag(f *pflag.FlagSet, name, what string) {
	f.Var(removed{name, what}, name, "removed: "+what+" — callerauth config convert FILE writes the AuthenticationConfiguration for --caller-authentication-config")
	_ = f.MarkHidden(name)
}

type removed struct{ name, what string }

func (r removed) String() string { return "" }
func (r removed) Set(string) error {
	return fmt.Errorf("--%s (%s) was removed: callerauth config convert FILE writes the same issuers as a Kubernetes AuthenticationConfiguration; give it with --caller-authentication-config", r.name, r.what)
}
func (r removed) Type() string { return "file" }

// Complete is the build function of [Command] for a service configured
// the one way: it completes the options o points to (parsed by then) and
// hands the configuration to newService, the service's New.
func Complete[C any, S Service](o interface{ Complete() (C, error) }, newService func(C) (S, error)) func(*cobra.Command) (Service, error) {
	return func(*cobra.Command) (Service, error) {
		c, err := o.Complete()
		if err != nil {
			return nil, err
		}
		s, err := newService(c)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// ParseArgs parses a service's command line as its binary would, with
// the flags add registers, without running it: what a chart renders, read
// by the service's own parser (test/chart).
func ParseArgs(name string, add func(*pflag.FlagSet), args []string) error {
	f := pflag.NewFlagSet(name, pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	add(f)
	if err := f.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if f.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", name, f.Args())
	}
	return nil
}
