// Package controller is the vmafx controller: the JobService that operators
// and CLIs submit quality-measurement jobs to and nodes claim them from.
// Every RPC is authenticated offline against the caller's tenant identity
// provider (one issuer per tenant) and role-checked; the tenant whose
// issuer signed the token scopes everything the caller sees. See
// docs/vmafx.md.
package controller

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// Tenant is one tenant of the tenants file.
type Tenant struct {
	// Name is the tenant: it scopes every job its callers submit, read
	// and claim.
	Name string `json:"name"`
	// Issuer is the iss of the tenant identity provider's tokens.
	Issuer string `json:"issuer"`
	// DiscoveryURL, when the issuer is not served at its own name.
	DiscoveryURL string `json:"discovery_url,omitempty"`
	// JWKSURL skips discovery.
	JWKSURL string `json:"jwks_url,omitempty"`
	// Audiences a token must carry at least one of.
	Audiences []string `json:"audiences"`
	// RolesClaim holds the caller's roles, a space-separated string or a
	// list. Default "scp".
	RolesClaim string `json:"roles_claim,omitempty"`
	// TenantClaim, when set, must carry Name.
	TenantClaim string `json:"tenant_claim,omitempty"`
	// CAFile trusts the issuer's discovery and JWKS endpoints.
	CAFile string `json:"ca_file,omitempty"`
	// Algorithms allowed; default RS256 and ES256.
	Algorithms []string `json:"algorithms,omitempty"`
}

// Tenants is the tenants file.
type Tenants struct {
	Tenants []Tenant `json:"tenants"`
	// Leeway is the clock skew allowed on nbf and iat (default 1m).
	Leeway string `json:"leeway,omitempty"`
}

// LoadTenants reads the tenants file (YAML), the controller's issuers before
// the AuthenticationConfiguration replaced it — read now only by callerauth
// config convert, which writes the same issuers as an
// AuthenticationConfiguration — strictly — unknown keys and a
// key written twice are refused — and checks it as the verifier would: an
// issuer per tenant, never two tenants on one issuer.
func LoadTenants(path string) (*Tenants, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("controller: --tenants: %w", err)
	}
	var t Tenants
	j, err := ijson.FromYAML(b) // a key written twice is an error
	if err == nil {
		err = ijson.Decode(j, &t) // so are an unknown key and a null
	}
	if err != nil {
		return nil, fmt.Errorf("controller: %s: %w", path, err)
	}
	var errs []error
	if _, err := oidc.ParseLeeway(t.Leeway); err != nil {
		errs = append(errs, fmt.Errorf("controller: %s: %w", path, err))
	}
	if len(t.Tenants) == 0 {
		errs = append(errs, fmt.Errorf("controller: %s: no tenants: nobody could call", path))
	}
	names, issuers := map[string]bool{}, map[string]string{}
	for i, tn := range t.Tenants {
		where := fmt.Sprintf("controller: %s: tenants[%d]", path, i)
		if len(validation.IsDNS1123Label(tn.Name)) > 0 {
			errs = append(errs, fmt.Errorf("%s: name %q: want a DNS label (lowercase letters, digits, '-')", where, tn.Name))
		}
		if names[tn.Name] {
			errs = append(errs, fmt.Errorf("%s: tenant %q is listed twice", where, tn.Name))
		}
		names[tn.Name] = true
		if other, ok := issuers[tn.Issuer]; ok && tn.Issuer != "" {
			errs = append(errs, fmt.Errorf("%s: issuer %s already belongs to tenant %q: the issuer decides the tenant, so it can belong to one only", where, tn.Issuer, other))
		}
		issuers[tn.Issuer] = tn.Name
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if _, err := oidc.New(t.OIDC()); err != nil {
		return nil, fmt.Errorf("controller: %s: %w", path, err)
	}
	return &t, nil
}

// OIDC is the verifier's configuration: one issuer per tenant, the caller's
// tenant the one whose issuer signed the token.
func (t *Tenants) OIDC() oidc.Config {
	var cfg oidc.Config
	cfg.Leeway, _ = oidc.ParseLeeway(t.Leeway) // checked by LoadTenants
	for _, tn := range t.Tenants {
		roles := tn.RolesClaim
		if roles == "" {
			roles = "scp"
		}
		cfg.Issuers = append(cfg.Issuers, oidc.IssuerConfig{
			Issuer: tn.Issuer, DiscoveryURL: tn.DiscoveryURL, JWKSURL: tn.JWKSURL, Audiences: tn.Audiences,
			Algorithms: tn.Algorithms, Tenant: tn.Name, TenantClaim: tn.TenantClaim, RolesClaim: roles, CAFile: tn.CAFile,
		})
	}
	return cfg
}

// CheckTenantPerIssuer is what the controller requires of an
// AuthenticationConfiguration: every issuer maps the extra key
// callerauth.dev/tenant to one constant tenant (a string literal, such as
// '"tenant-a"'), a DNS label, and no two issuers to the same tenant — the
// issuer that signed a token decides its tenant, so one tenant's identity
// provider can never speak for another's.
func CheckTenantPerIssuer(cfg oidc.Config) error {
	var errs []error
	byTenant := map[string]string{}
	for i, ic := range cfg.Issuers {
		where := fmt.Sprintf("controller: jwt[%d] (%s)", i, ic.Issuer)
		tenant, ok := authconfig.ConstantExtra(ic, authconfig.ExtraTenant)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: claimMappings.extra needs key %s with a constant valueExpression such as '\"tenant-a\"': the issuer decides the tenant", where, authconfig.ExtraTenant))
			continue
		case len(validation.IsDNS1123Label(tenant)) > 0:
			errs = append(errs, fmt.Errorf("%s: tenant %q: want a DNS label (lowercase letters, digits, '-')", where, tenant))
		}
		if other, dup := byTenant[tenant]; dup {
			errs = append(errs, fmt.Errorf("%s: tenant %q is already the tenant of %s: a tenant has one identity provider", where, tenant, other))
		}
		byTenant[tenant] = ic.Issuer
	}
	return errors.Join(errs...)
}
