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

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/serve"
)

// Options are the PDP's flags.
type Options struct {
	// Serve: --listen, --tls-cert-file, --tls-key-file, --metrics-listen,
	// --log-level, --shutdown-timeout and the --http-* limits.
	Serve serve.Options
	// Auth: --caller-backend, --kubeconfig, --caller-authentication-config,
	// --caller-cache-ttl, --caller-review-timeout.
	Auth           serve.AuthOptions
	InsecureHTTP   bool
	PolicyDir      string
	Registry       string
	CallerAuthMode string
	AllowAuthOff   bool
	CallerAudience string
	CallerBindings []string
	SigningKeyFile string
	ReloadInterval time.Duration
	// AuthZENBaseURL is the PDP identifier its AuthZEN metadata publishes
	// (--authzen-base-url); empty: the serving certificate's first name and
	// the port served on (none over plain HTTP).
	AuthZENBaseURL string
	// AuthZENMaxBody bounds an AuthZEN request's body
	// (--authzen-max-body-bytes): 1,000 fully specified evaluations fit in
	// the default.
	AuthZENMaxBody int64
	// SignGroupMax is the most /v1/check records one signature covers
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
	Logger              *slog.Logger
	Authenticator       authn.Authenticator // replaces the backend, for tests
}

// Validate refuses flags that cannot be honoured, naming them. It changes
// nothing; [New] fills the defaults of a struct left unset.
func (o Options) Validate() error {
	var errs []error
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Auth.Validate(); err != nil {
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
	o.authzenDefaults() // a copy: zero is the default
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
	if o.ReloadInterval < 0 {
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
	if o.CallerAuthMode == ModeOff {
		if !o.AllowAuthOff {
			errs = append(errs, errors.New("pdp: --caller-auth-mode off needs --insecure-caller-auth-off: without it anyone who reaches the PDP obtains decisions"))
		}
	} else if _, err := callerAuthMode(o.CallerAuthMode); err != nil {
		errs = append(errs, fmt.Errorf("pdp: --caller-auth-mode %q: want enforce, warn or off", o.CallerAuthMode))
	}
	if o.CallerAudience == "" {
		errs = append(errs, errors.New("pdp: --caller-audience may not be empty"))
	}
	bindings, _, err := parseBindings(o.CallerBindings)
	if err != nil {
		errs = append(errs, err)
	}
	if o.CallerAuthMode != ModeOff && len(bindings) == 0 {
		errs = append(errs, errors.New("pdp: at least one --caller-binding SYSTEM=PRINCIPAL is required: no caller could represent any system"))
	}
	return errors.Join(errs...)
}

// authzenDefaults fills the AuthZEN limits a struct left unset.
func (o *Options) authzenDefaults() {
	if o.AuthZENMaxBody == 0 {
		o.AuthZENMaxBody = DefaultAuthZENMaxBody
	}
	if o.SearchPageSize == 0 {
		o.SearchPageSize = DefaultSearchPageSize
	}
	if o.SearchMaxCandidates == 0 {
		o.SearchMaxCandidates = DefaultSearchMaxCandidates
	}
}

// parseBindings reads --caller-binding SYSTEM=PRINCIPAL values. A principal
// in the service-account form must be a well-formed one (it is compared by
// exact string with what TokenReview returns); any other principal is
// allowed, since a TokenReview backed by another authenticator can return
// other usernames, but comes back in warnings: a ServiceAccount token never
// matches it.
func parseBindings(values []string) (map[string]string, []string, error) {
	bindings := map[string]string{}
	var errs []error
	var warnings []string
	for _, b := range values {
		sys, principal, ok := strings.Cut(b, "=")
		if !ok || sys == "" || principal == "" || strings.TrimSpace(b) != b {
			errs = append(errs, fmt.Errorf("pdp: --caller-binding %q: want SYSTEM=PRINCIPAL", b))
			continue
		}
		if _, dup := bindings[sys]; dup {
			errs = append(errs, fmt.Errorf("pdp: --caller-binding: system %q is bound twice", sys))
		}
		bindings[sys] = principal
		if strings.HasPrefix(principal, binding.ServiceAccountPrefix) {
			if err := binding.ValidateServiceAccountUsername(principal); err != nil {
				errs = append(errs, fmt.Errorf("pdp: --caller-binding %q: principal %q: %w", b, principal, err))
			}
		} else {
			warnings = append(warnings, fmt.Sprintf("--caller-binding %q: principal %q is not a service-account username (%s<namespace>:<name>); a ServiceAccount token will never match it", b, principal, binding.ServiceAccountPrefix))
		}
	}
	return bindings, warnings, errors.Join(errs...)
}

// callerAuthMode reads --caller-auth-mode other than off: enforce, or warn
// (the PDP's name for the guard's audit).
func callerAuthMode(s string) (guard.Mode, error) {
	if s == ModeWarn {
		s = string(guard.Audit)
	}
	return guard.ParseMode(s)
}
