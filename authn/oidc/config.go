// Package oidc verifies bearer tokens offline, against the signing keys that
// each trusted issuer publishes (OIDC discovery and JWKS): one issuer per
// tenant, several at once.
//
// The token's unverified iss picks the issuer; an unknown issuer is
// token_invalid. The signature must verify with a key from that issuer's
// JWKS under an allowed algorithm (never none, never an HMAC algorithm); an
// unknown kid triggers one rate-limited refetch, so key rotation needs no
// restart. Then aud, exp, nbf and iat are checked.
//
// It works against the embedded dev issuer and against a Kubernetes API
// server's /.well-known/openid-configuration and /openid/v1/jwks. Offline
// verification cannot see revocation: a deleted pod's token stays valid
// until it expires. Use TokenReview (authn/kube) where that matters.
package oidc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/authn"
)

// IssuerConfig is one trusted issuer.
type IssuerConfig struct {
	// Issuer is the exact iss of its tokens. Required; an https:// URL.
	Issuer string
	// DiscoveryURL is where /.well-known/openid-configuration is fetched
	// from. Default: Issuer. Set it when the issuer's name is not where it
	// is served — a Kubernetes API server's issuer is usually
	// https://kubernetes.default.svc.cluster.local. The discovery document
	// must still name Issuer.
	DiscoveryURL string
	// DiscoveryDocumentURL is the exact URL of the discovery document, as
	// an AuthenticationConfiguration's discoveryURL gives it (nothing is
	// appended). Exclusive with DiscoveryURL.
	DiscoveryDocumentURL string
	// JWKSURL, when set, is used directly and discovery is skipped.
	JWKSURL string
	// Audiences a token must carry at least one of. Required.
	Audiences []string
	// Algorithms allowed for signatures. Default RS256 and ES256. Only
	// asymmetric algorithms are accepted.
	Algorithms []string
	// Tenant is the tenant every caller of this issuer belongs to.
	Tenant string
	// TenantClaim, when set, names a claim that carries the caller's
	// tenant; if Tenant is also set, the claim must equal it. A token
	// without the claim (or with it empty) states no tenant: its caller's
	// Tenant is "", which a tenant-scoped service refuses tenant_missing.
	TenantClaim string
	// RolesClaim names a claim holding the caller's roles: a list of
	// strings or one space-separated string (e.g. "roles", "groups").
	RolesClaim string
	// GroupsClaim names a claim holding the caller's groups. Default
	// "groups". Kubernetes service-account tokens get the API server's
	// groups (system:serviceaccounts, ...:<namespace>, system:authenticated).
	GroupsClaim string
	// CAFile is a PEM bundle trusted for discovery and JWKS fetches.
	// Default: the system roots.
	CAFile string
	// CertificateAuthority is the same bundle given inline (PEM), as an
	// AuthenticationConfiguration gives it. Exclusive with CAFile.
	CertificateAuthority string
	// BearerTokenFile, when set, is read on every fetch and sent as a
	// bearer token to the discovery and JWKS endpoints (a Kubernetes API
	// server that does not serve them anonymously).
	BearerTokenFile string
	// HTTPClient, when set, fetches discovery and JWKS instead of a client
	// built from CAFile: one that already carries its credentials (the
	// Kubernetes client's, for the API server's own keys). Programmatic
	// only.
	HTTPClient *http.Client `json:"-"`
	// Mapping, when set, alone makes the caller of a verified token:
	// Tenant, TenantClaim, RolesClaim and GroupsClaim are then unused, and
	// the token is held to the API server's checks of an ID token's
	// shape as well. Package authn/authconfig sets it to an
	// AuthenticationConfiguration's claim mappings and validation rules.
	// Programmatic only.
	Mapping Mapping `json:"-"`
}

// Mapping makes the caller of a token whose signature, issuer, audience
// and lifetime have been verified.
type Mapping interface {
	// Identity sets caller's Username, UID, Groups, Extra, Tenant and
	// Roles from payload, the token's claims (a JSON object, already read
	// strictly). An error refuses the token; its reason is
	// token_invalid unless it is an [authn.Error].
	Identity(ctx context.Context, payload []byte, caller *authn.Caller) error
}

// Config configures [New].
type Config struct {
	// Issuers trusted, at least one.
	Issuers []IssuerConfig
	// Audience, when set, is the service's own: a token must carry it as
	// well as an audience its issuer lists (a file of issuers shared by
	// several services lists theirs all, and a token minted for one of
	// the others is refused token_invalid here), and at least one issuer
	// must list it (else every token would be refused: the configuration
	// is refused, naming both). Empty: any audience an issuer lists.
	Audience string
	// Leeway is the clock skew allowed on nbf and iat. Default 1 minute.
	// exp has no leeway: a token is refused from its exp on.
	Leeway time.Duration
	// RefreshMinInterval is the least time between two JWKS fetches of one
	// issuer caused by unknown kids. A token whose kid is not among the
	// keys is not evidence against its caller (the issuer may have just
	// rotated): the keys are fetched again at once when the last fetch is
	// at least this old; otherwise the token is answered
	// validator_unavailable (retryable) until a fetch may run. Default 10 s.
	RefreshMinInterval time.Duration
	// MaxKeyAge is how long fetched keys are used before they are fetched
	// again on the next verification: a key the issuer removed is refused
	// at most this long after (keys missing from a successful fetch are
	// dropped at once). Default 5 minutes.
	MaxKeyAge time.Duration
	// MaxStaleKeys bounds how long keys are still trusted while every
	// fetch fails: past the last successful fetch plus MaxStaleKeys,
	// verification answers validator_unavailable (and
	// Stats().StaleRefusals counts it) until a fetch succeeds. Default 1
	// hour.
	MaxStaleKeys time.Duration
	// Logger reports, once per key, the JWKS entries that are ignored as
	// unusable (RFC 7517 §5). Default slog.Default().
	Logger *slog.Logger
	// Timeout bounds one discovery or JWKS fetch. Default 5 s.
	Timeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Defaults.
const (
	DefaultLeeway             = time.Minute
	DefaultRefreshMinInterval = 10 * time.Second
	DefaultMaxKeyAge          = 5 * time.Minute
	DefaultMaxStaleKeys       = time.Hour
	// MinRSABits is the smallest RSA key used (RFC 7518 §3.3).
	MinRSABits     = 2048
	DefaultTimeout = 5 * time.Second
)

var allowedAlgorithms = []string{
	string(jose.RS256), string(jose.RS384), string(jose.RS512),
	string(jose.PS256), string(jose.PS384), string(jose.PS512),
	string(jose.ES256), string(jose.ES384), string(jose.ES512),
	string(jose.EdDSA),
}

// Validate reports, all at once, what in c [New] would refuse, naming
// the issuer and the setting. c is not changed.
func (c Config) Validate() error {
	c.Issuers = slices.Clone(c.Issuers)
	return c.validate()
}

// MaxConfigBytes bounds a configuration file of issuers (an issuers file,
// an AuthenticationConfiguration): hundreds of issuers with their CA
// bundles fit.
const MaxConfigBytes = 4 << 20

// ReadConfigFile reads a configuration file of at most MaxConfigBytes.
func ReadConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("oidc: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("oidc: %w", err)
	}
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("oidc: %s: over %d bytes; a configuration of issuers is at most that", path, MaxConfigBytes)
	}
	return b, nil
}

func (c *Config) validate() error {
	if len(c.Issuers) == 0 {
		return errors.New("oidc: at least one issuer is required")
	}
	var errs []error
	if c.Audience != "" && !slices.ContainsFunc(c.Issuers, func(ic IssuerConfig) bool { return slices.Contains(ic.Audiences, c.Audience) }) {
		var listed []string
		for _, ic := range c.Issuers {
			listed = append(listed, ic.Audiences...)
		}
		errs = append(errs, fmt.Errorf("oidc: no issuer lists the service's audience %q (the issuers list %q): every token would be refused; add it to the audiences of the issuers whose tokens this service takes", c.Audience, listed))
	}
	seen := map[string]bool{}
	for i := range c.Issuers {
		ic := &c.Issuers[i]
		name := fmt.Sprintf("issuers[%d]", i)
		if ic.Issuer != "" {
			name = fmt.Sprintf("issuer %q", ic.Issuer)
		}
		if err := httpsURL(ic.Issuer); err != nil {
			errs = append(errs, fmt.Errorf("oidc: %s: issuer: %w", name, err))
		}
		if seen[ic.Issuer] {
			errs = append(errs, fmt.Errorf("oidc: %s is configured twice", name))
		}
		seen[ic.Issuer] = true
		if ic.DiscoveryURL != "" && ic.DiscoveryDocumentURL != "" {
			errs = append(errs, fmt.Errorf("oidc: %s: discoveryURL and discoveryDocumentURL: give one", name))
		}
		for _, u := range []struct{ key, val string }{{"discoveryURL", ic.DiscoveryURL}, {"discoveryDocumentURL", ic.DiscoveryDocumentURL}, {"jwksURL", ic.JWKSURL}} {
			if u.val != "" {
				if err := httpsURL(u.val); err != nil {
					errs = append(errs, fmt.Errorf("oidc: %s: %s: %w", name, u.key, err))
				}
			}
		}
		if len(ic.Audiences) == 0 || slices.Contains(ic.Audiences, "") {
			errs = append(errs, fmt.Errorf("oidc: %s: audiences: at least one non-empty audience is required", name))
		}
		if len(ic.Algorithms) == 0 {
			ic.Algorithms = []string{string(jose.RS256), string(jose.ES256)}
		}
		for _, a := range ic.Algorithms {
			if !slices.Contains(allowedAlgorithms, a) {
				errs = append(errs, fmt.Errorf("oidc: %s: algorithm %q is not allowed (allowed: %s); never none or an HMAC algorithm", name, a, strings.Join(allowedAlgorithms, ", ")))
			}
		}
		if ic.GroupsClaim == "" {
			ic.GroupsClaim = "groups"
		}
		if ic.CAFile != "" {
			if _, err := loadPool(ic.CAFile); err != nil {
				errs = append(errs, fmt.Errorf("oidc: %s: caFile: %w", name, err))
			}
		}
		if ic.CertificateAuthority != "" {
			if ic.CAFile != "" {
				errs = append(errs, fmt.Errorf("oidc: %s: caFile and certificateAuthority: give one", name))
			} else if _, err := poolOf([]byte(ic.CertificateAuthority), "certificateAuthority"); err != nil {
				errs = append(errs, fmt.Errorf("oidc: %s: %w", name, err))
			}
		}
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.Leeway < 0 {
		c.Leeway = 0
	}
	if c.RefreshMinInterval <= 0 {
		c.RefreshMinInterval = DefaultRefreshMinInterval
	}
	if c.MaxKeyAge <= 0 {
		c.MaxKeyAge = DefaultMaxKeyAge
	}
	if c.MaxStaleKeys <= 0 {
		c.MaxStaleKeys = DefaultMaxStaleKeys
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return errors.Join(errs...)
}

func httpsURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("required")
	case err != nil:
		return err
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%q is not an https:// URL", s)
	}
	return nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return poolOf(b, path)
}

func poolOf(pem []byte, where string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", where)
	}
	return pool, nil
}

func httpClient(ic *IssuerConfig) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	var pool *x509.CertPool
	var err error
	switch {
	case ic.CAFile != "":
		pool, err = loadPool(ic.CAFile)
	case ic.CertificateAuthority != "":
		pool, err = poolOf([]byte(ic.CertificateAuthority), "certificateAuthority")
	}
	if err != nil {
		return nil, err
	}
	tr.TLSClientConfig.RootCAs = pool
	return &http.Client{Transport: tr}, nil
}
