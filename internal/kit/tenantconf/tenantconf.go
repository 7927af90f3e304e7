// Package tenantconf writes the vmafx controller's issuers for tests: each
// tenant's identity provider as the AuthenticationConfiguration that
// callerauth config convert writes (one issuer per tenant, the tenant a
// constant extra key, the roles from scp).
package tenantconf

import (
	"os"
	"testing"

	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
)

// Tenant is one tenant's identity provider.
type Tenant struct {
	Name, Issuer string
	// DiscoveryURL is where the discovery document is served, when the
	// issuer is not (a dev issuer on a loopback port).
	DiscoveryURL string
	// CAFile trusts the issuer's discovery and keys.
	CAFile string
}

// Write writes the AuthenticationConfiguration of tenants, audience
// vmafx-controller, to path, and returns path.
func Write(t testing.TB, path string, tenants ...Tenant) string {
	t.Helper()
	var cfg oidc.Config
	for _, tn := range tenants {
		cfg.Issuers = append(cfg.Issuers, oidc.IssuerConfig{Issuer: tn.Issuer, DiscoveryURL: tn.DiscoveryURL, Audiences: []string{"vmafx-controller"},
			Tenant: tn.Name, RolesClaim: "scp", CAFile: tn.CAFile})
	}
	doc, _, err := authconfig.Convert(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
