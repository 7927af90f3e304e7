package oidc

import (
	"errors"
	"fmt"
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

// ParseLeeway reads the clock skew an issuers file allows on nbf and iat:
// a duration of zero or more ("1m"); "" is the default (0 here, which
// [Config] reads as its default). The one leeway parser of every issuers
// file (the oidc backend's, the vmafx controller's tenants).
func ParseLeeway(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("leeway %q: want a duration of zero or more, such as 1m", s)
	}
	return d, nil
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
	b, err := ReadConfigFile(path)
	if err != nil {
		return Config{}, err
	}
	var f file
	if err := ijson.Decode(b, &f); err != nil {
		return Config{}, fmt.Errorf("oidc: %s: %w", path, err)
	}
	cfg := Config{}
	if cfg.Leeway, err = ParseLeeway(f.Leeway); err != nil {
		return Config{}, fmt.Errorf("oidc: %s: %w", path, err)
	}
	for _, i := range f.Issuers {
		cfg.Issuers = append(cfg.Issuers, IssuerConfig{Issuer: i.Issuer, DiscoveryURL: i.DiscoveryURL, JWKSURL: i.JWKSURL, Audiences: i.Audiences,
			Algorithms: i.Algorithms, Tenant: i.Tenant, TenantClaim: i.TenantClaim, RolesClaim: i.RolesClaim, GroupsClaim: i.GroupsClaim,
			CAFile: i.CAFile, BearerTokenFile: i.BearerTokenFile})
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w (in %s)", err, path)
	}
	if len(cfg.Issuers) == 0 {
		return Config{}, errors.New("oidc: " + path + ": no issuers")
	}
	return cfg, nil
}
