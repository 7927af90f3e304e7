package pdp

// The pdp's options: its flags, what Validate refuses, the AuthZEN
// defaults and the caller bindings.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
)

// Options are the PDP's flags. Start from [NewOptions], which holds
// every default; [Options.Complete] validates them and returns the
// [Config] that [New] reads.
type Options struct {
	// Serve: --listen, --tls-cert-file, --tls-key-file, --metrics-listen,
	// --log-level, --shutdown-timeout and the --http-* limits.
	Serve serve.Options
	// Callers: --caller-audience, --caller-auth-mode,
	// --insecure-caller-auth-off, --caller-backend, --kubeconfig,
	// --caller-authentication-config, --caller-cache-ttl and the rest.
	Callers        callers.Options
	InsecureHTTP   bool
	PolicyDir      string
	Registry       string
	CallerBindings []string
	SigningKeyFile string
	// ReloadInterval is how often the policy, registry and key files are
	// looked at (--reload-interval).
	ReloadInterval time.Duration
	// AuthZENBaseURL is the PDP identifier its AuthZEN metadata publishes
	// (--authzen-base-url); empty: the serving certificate's first name and
	// the port served on (none over plain HTTP).
	AuthZENBaseURL string
	// AuthZENMaxBody bounds an AuthZEN request's body
	// (--authzen-max-body-bytes): 1,000 fully specified evaluations fit in
	// the default.
	AuthZENMaxBody int64
	// SignGroupMax is the most records one signature covers (checks, and
	// single AuthZEN evaluations)
	// (--sign-group-max): records that arrive while one is being signed
	// share the next. 0: every record its own signature.
	SignGroupMax int
	// SearchPageSize is a search page's size when the request names no
	// page.limit, and the largest it may name (--authzen-search-page-size).
	SearchPageSize int
	// SearchMaxCandidates bounds the candidates one search page evaluates
	// (--authzen-search-max-candidates): a page that reaches it stops
	// there, with a next_token, however few results it holds.
	SearchMaxCandidates int
	// DecisionLog: --decision-log and its settings (docs/decision-log.md).
	DecisionLog decisionlog.Options
}

// NewOptions returns the pdp's defaults: the one place they are written.
func NewOptions() Options {
	o := Options{Serve: serve.NewOptions(":8443", "127.0.0.1:9090").For("pdp"), Callers: callers.NewOptions(), ReloadInterval: 2 * time.Second,
		SignGroupMax: DefaultSignGroup, AuthZENMaxBody: DefaultAuthZENMaxBody, SearchPageSize: DefaultSearchPageSize, SearchMaxCandidates: DefaultSearchMaxCandidates,
		DecisionLog: decisionlog.NewOptions()}
	o.Callers.Audience, o.Callers.CanBeOff = DefaultAudience, true
	return o
}

// DefaultAudience is --caller-audience's default: flex-auth's.
const DefaultAudience = "flex-auth"

// AddFlags registers the pdp's flags, with o's values as their defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.Serve.AddFlags(f)
	o.Callers.AddServiceFlags(f)
	serve.AddCallerFlags(f, &o.Callers)
	f.BoolVar(&o.InsecureHTTP, "insecure-http", o.InsecureHTTP, "serve plain HTTP instead (only on a loopback --listen): bearer tokens would otherwise cross the network in clear")
	f.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "policy package: manifest.json, *.cedar, one *.cedarschema")
	f.StringVar(&o.Registry, "registry", o.Registry, "registry snapshot: a JSON array of Cedar entities")
	f.StringArrayVar(&o.CallerBindings, "caller-binding", o.CallerBindings, "SYSTEM=PRINCIPAL: the one principal that may represent SYSTEM (repeatable)")
	f.StringVar(&o.SigningKeyFile, "signing-key-file", o.SigningKeyFile, "PEM private key(s) signing decision records; the last one signs, all are published; reloaded with the policy")
	f.StringVar(&o.AuthZENBaseURL, "authzen-base-url", o.AuthZENBaseURL, "the https:// URL the AuthZEN metadata names as this PDP (default: the serving certificate's first name and the port served on; never the request's Host; none over plain HTTP)")
	f.IntVar(&o.SignGroupMax, "sign-group-max", o.SignGroupMax, "the most records one signature covers: /v1/check records, and single AuthZEN evaluations' records, that arrive while one is being signed share the next, through a Merkle root (0: each record its own signature)")
	f.Int64Var(&o.AuthZENMaxBody, "authzen-max-body-bytes", o.AuthZENMaxBody, "the largest AuthZEN request body (POST /v1/check keeps its 64 KiB)")
	f.IntVar(&o.SearchPageSize, "authzen-search-page-size", o.SearchPageSize, "a search page's results when the request names no page.limit, and the most page.limit may ask")
	f.IntVar(&o.SearchMaxCandidates, "authzen-search-max-candidates", o.SearchMaxCandidates, "the candidates one search page evaluates at most; a page that reaches it ends there, with a next_token")
	f.DurationVar(&o.ReloadInterval, "reload-interval", o.ReloadInterval, "how often the policy, registry and signing key files are checked for a change (SIGHUP reloads at once)")
	o.DecisionLog.AddFlags(f)
}

// Validate refuses options that cannot be honoured, naming the flags:
// what [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
}

// Config is the pdp's completed configuration: everything parsed and
// defaulted, as [New] reads it.
type Config struct {
	Serve serve.Options
	// Callers is the caller authentication, its audience and mode with
	// it (Off: --caller-auth-mode off); Complete makes it from the flags,
	// a test may give it an authenticator of its own
	// (Config.WithAuthenticator).
	Callers callers.Config
	// Logger nil: JSON at --log-level on standard error.
	Logger *slog.Logger
	// Bindings are --caller-binding's, system to principal; Warnings are
	// what is legal but never matches a ServiceAccount token.
	Bindings map[string]string
	Warnings []string

	InsecureHTTP                                bool
	PolicyDir, Registry, SigningKeyFile         string
	ReloadInterval                              time.Duration
	AuthZENBaseURL                              string
	AuthZENMaxBody                              int64
	SignGroupMax, SearchPageSize, MaxCandidates int
	DecisionLog                                 decisionlog.Config
}

// Complete validates the options — refusing every one that cannot be
// honoured, naming its flag — and returns the configuration New reads:
// each value parsed once, here.
func (o Options) Complete() (Config, error) {
	var errs []error
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	callerCfg, err := o.Callers.Complete()
	if err != nil {
		errs = append(errs, err)
	}
	if o.Serve.Listen == "" {
		errs = append(errs, errors.New("pdp: --listen is required"))
	} else if o.InsecureHTTP {
		host, _, err := net.SplitHostPort(o.Serve.Listen)
		ip := net.ParseIP(host)
		if err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			errs = append(errs, fmt.Errorf("pdp: --insecure-http serves plain HTTP only on a loopback address; --listen %q is not one", o.Serve.Listen))
		}
		if o.Serve.HasTLS() {
			errs = append(errs, errors.New("pdp: --insecure-http and --tls-cert-file/--tls-key-file contradict each other"))
		}
	} else if !o.Serve.HasTLS() {
		errs = append(errs, errors.New("pdp: --tls-cert-file and --tls-key-file are required (or --insecure-http on a loopback --listen)"))
	}
	if o.AuthZENBaseURL != "" {
		u, err := url.Parse(o.AuthZENBaseURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("pdp: --authzen-base-url %q: want an https:// URL with no query or fragment (AuthZEN 1.0 §9.1)", o.AuthZENBaseURL))
		} else if strings.Trim(u.Path, "/") != "" {
			errs = append(errs, fmt.Errorf("pdp: --authzen-base-url %q: the pdp serves its endpoints at the root, so the identifier has no path (the per-package identifier is <base>/<package id>, from /.well-known/authzen-configuration/<package id>)", o.AuthZENBaseURL))
		}
	}
	if o.AuthZENMaxBody < MaxBody || o.AuthZENMaxBody > MaxAuthZENBody {
		errs = append(errs, fmt.Errorf("pdp: --authzen-max-body-bytes %d: want %d to %d", o.AuthZENMaxBody, MaxBody, MaxAuthZENBody))
	}
	if o.SearchPageSize < 1 || o.SearchPageSize > MaxSearchPageSize {
		errs = append(errs, fmt.Errorf("pdp: --authzen-search-page-size %d: want 1 to %d", o.SearchPageSize, MaxSearchPageSize))
	}
	if o.SearchMaxCandidates < o.SearchPageSize || o.SearchMaxCandidates > MaxSearchCandidates {
		errs = append(errs, fmt.Errorf("pdp: --authzen-search-max-candidates %d: want --authzen-search-page-size (%d) to %d", o.SearchMaxCandidates, o.SearchPageSize, MaxSearchCandidates))
	}
	if o.SignGroupMax < 0 || o.SignGroupMax > MaxSignGroup {
		errs = append(errs, fmt.Errorf("pdp: --sign-group-max %d: want 0 (each record signed alone) to %d", o.SignGroupMax, MaxSignGroup))
	}
	if o.ReloadInterval <= 0 {
		errs = append(errs, fmt.Errorf("pdp: --reload-interval %s: want a positive duration", o.ReloadInterval))
	}
	if o.PolicyDir == "" {
		errs = append(errs, errors.New("pdp: --policy-dir is required"))
	}
	if o.Registry == "" {
		errs = append(errs, errors.New("pdp: --registry is required"))
	}
	if o.SigningKeyFile == "" {
		errs = append(errs, errors.New("pdp: --signing-key-file is required (callerauth decision keygen --out FILE makes one): records must be signed"))
	}
	bindings, warnings, err := binding.ParseSystemBindings("--caller-binding", o.CallerBindings)
	if err != nil {
		errs = append(errs, fmt.Errorf("pdp: %w", err))
	}
	dlog, err := o.DecisionLog.Complete()
	if err != nil {
		errs = append(errs, fmt.Errorf("pdp: %w", err))
	}
	if o.Callers.Mode != callers.ModeOff && len(bindings) == 0 {
		errs = append(errs, errors.New("pdp: at least one --caller-binding SYSTEM=PRINCIPAL is required: no caller could represent any system"))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return Config{Serve: o.Serve, Callers: callerCfg,
		Bindings: bindings, Warnings: warnings, InsecureHTTP: o.InsecureHTTP, PolicyDir: o.PolicyDir, Registry: o.Registry, SigningKeyFile: o.SigningKeyFile,
		ReloadInterval: o.ReloadInterval, AuthZENBaseURL: o.AuthZENBaseURL, AuthZENMaxBody: o.AuthZENMaxBody,
		SignGroupMax: o.SignGroupMax, SearchPageSize: o.SearchPageSize, MaxCandidates: o.SearchMaxCandidates, DecisionLog: dlog}, nil
}
