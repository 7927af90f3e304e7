package oidc

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// fileIssuer is one issuer in an issuers file.
type fileIssuer struct {
	Issuer          string   `json:"issuer"`
	DiscoveryURL    string   `json:"discovery_url"`
	JWKSURL         string   `json:"jwks_url"`
	Audiences       []string `json:"audiences"`
	Algorithms      []string `json:"algorithms"`
	Tenant          string   `json:"tenant"`
	TenantClaim     string   `json:"tenant_claim"`
	RolesClaim      string   `json:"roles_claim"`
	GroupsClaim     string   `json:"groups_claim"`
	CAFile          string   `json:"ca_file"`
	BearerTokenFile string   `json:"bearer_token_file"`
}

type file struct {
	Issuers []fileIssuer `json:"issuers"`
	Leeway  string       `json:"leeway"`
}

// LoadConfigFile reads the trusted issuers from a JSON file:
//
//	{"issuers": [{"issuer": "https://idp.tenant-a.example", "audiences": ["vmafx-controller"],
//	              "tenant": "tenant-a", "roles_claim": "roles", "ca_file": "/etc/idp/ca.crt"}],
//	 "leeway": "1m"}
//
// Each issuer's keys are the fields of [IssuerConfig] in snake_case. The
// file is read strictly — I-JSON (no key twice), no unknown key, every
// value of its type — and checked as [New] would check it, so a file that
// cannot be honoured is an error at start-up naming the key.
func LoadConfigFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("oidc: %w", err)
	}
	var f file
	if err := ijson.Decode(b, &f); err != nil {
		return Config{}, fmt.Errorf("oidc: %s: %w", path, err)
	}
	cfg := Config{}
	if f.Leeway != "" {
		if cfg.Leeway, err = time.ParseDuration(f.Leeway); err != nil || cfg.Leeway < 0 {
			return Config{}, fmt.Errorf("oidc: %s: leeway %q: want a duration such as 1m", path, f.Leeway)
		}
	}
	for _, i := range f.Issuers {
		cfg.Issuers = append(cfg.Issuers, IssuerConfig{Issuer: i.Issuer, DiscoveryURL: i.DiscoveryURL, JWKSURL: i.JWKSURL, Audiences: i.Audiences,
			Algorithms: i.Algorithms, Tenant: i.Tenant, TenantClaim: i.TenantClaim, RolesClaim: i.RolesClaim, GroupsClaim: i.GroupsClaim,
			CAFile: i.CAFile, BearerTokenFile: i.BearerTokenFile})
	}
	check := cfg
	check.Issuers = slices.Clone(cfg.Issuers)
	if err := check.validate(); err != nil {
		return Config{}, fmt.Errorf("%w (in %s)", err, path)
	}
	if len(cfg.Issuers) == 0 {
		return Config{}, errors.New("oidc: " + path + ": no issuers")
	}
	return cfg, nil
}
