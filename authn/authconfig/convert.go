package authconfig

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	k8scel "k8s.io/apiserver/pkg/cel"
	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/authn/oidc"
)

// Convert writes issuers of the older form (an
// issuers file, the vmafx tenants file, or built in code) as a Kubernetes
// AuthenticationConfiguration (apiserver.config.k8s.io/v1) that means the
// same to callerauth — what `callerauth config convert` prints. Each
// issuer's username is its sub, its groups the groups claim, its tenant
// the extra key callerauth.dev/tenant (a constant; a tenant claim becomes
// a claim validation rule), its roles callerauth.dev/roles (the roles
// claim, a list or a space-separated string). What the newer form cannot
// say (a jwks_url, a bearer token file) is an error; what it says
// differently (the algorithms, the leeway) comes back as warnings. The
// result is read back with [Parse] before it
// is returned.
func Convert(cfg oidc.Config) (doc []byte, warnings []string, err error) {
	out := apiserverv1.AuthenticationConfiguration{}
	out.APIVersion, out.Kind = "apiserver.config.k8s.io/v1", "AuthenticationConfiguration"
	var errs []error
	empty := ""
	if cfg.Leeway != 0 && cfg.Leeway != oidc.DefaultLeeway {
		warnings = append(warnings, fmt.Sprintf("leeway %s: an AuthenticationConfiguration has no leeway; callerauth allows %s on nbf and iat", cfg.Leeway, oidc.DefaultLeeway))
	}
	for _, ic := range cfg.Issuers {
		where := fmt.Sprintf("issuer %s", ic.Issuer)
		j := apiserverv1.JWTAuthenticator{}
		j.Issuer.URL, j.Issuer.Audiences = ic.Issuer, slices.Clone(ic.Audiences)
		j.Issuer.AudienceMatchPolicy = apiserverv1.AudienceMatchPolicyMatchAny
		switch {
		case ic.JWKSURL != "":
			errs = append(errs, fmt.Errorf("%s: jwks_url: an AuthenticationConfiguration finds the keys through discovery only; give its discovery_url", where))
		case ic.DiscoveryDocumentURL != "":
			j.Issuer.DiscoveryURL = &ic.DiscoveryDocumentURL
		case ic.DiscoveryURL != "":
			u := strings.TrimSuffix(ic.DiscoveryURL, "/") + "/.well-known/openid-configuration"
			j.Issuer.DiscoveryURL = &u
		}
		if ic.BearerTokenFile != "" {
			errs = append(errs, fmt.Errorf("%s: bearer_token_file: an AuthenticationConfiguration fetches discovery and keys anonymously", where))
		}
		j.Issuer.CertificateAuthority = ic.CertificateAuthority
		if ic.CAFile != "" {
			ca, err := os.ReadFile(ic.CAFile)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: ca_file: %w", where, err))
			}
			j.Issuer.CertificateAuthority = string(ca)
		}
		if len(ic.Algorithms) > 0 && !sameSet(ic.Algorithms, kubernetesSigningAlgorithms) {
			warnings = append(warnings, fmt.Sprintf("%s: algorithms %s: an AuthenticationConfiguration accepts %s from every issuer", where,
				strings.Join(ic.Algorithms, ", "), strings.Join(kubernetesSigningAlgorithms, ", ")))
		}
		j.ClaimMappings.Username = apiserverv1.PrefixedClaimOrExpression{Claim: "sub", Prefix: &empty}
		groups := ic.GroupsClaim
		if groups == "" {
			groups = "groups"
		}
		j.ClaimMappings.Groups = apiserverv1.PrefixedClaimOrExpression{Claim: groups, Prefix: &empty}
		switch {
		case ic.Tenant != "" && ic.TenantClaim != "":
			j.ClaimValidationRules = append(j.ClaimValidationRules, apiserverv1.ClaimValidationRule{
				Expression: fmt.Sprintf("has(claims.%[1]s) && claims.%[1]s == %[2]q", celName(ic.TenantClaim), ic.Tenant),
				Message:    fmt.Sprintf("the token must state tenant %s in claim %s", ic.Tenant, ic.TenantClaim)})
			warnings = append(warnings, fmt.Sprintf("%s: tenant_claim %s: a token without it is now refused token_invalid (it was tenant_missing)", where, ic.TenantClaim))
			fallthrough
		case ic.Tenant != "":
			j.ClaimMappings.Extra = append(j.ClaimMappings.Extra, apiserverv1.ExtraMapping{Key: ExtraTenant, ValueExpression: fmt.Sprintf("%q", ic.Tenant)})
		case ic.TenantClaim != "":
			j.ClaimMappings.Extra = append(j.ClaimMappings.Extra, apiserverv1.ExtraMapping{Key: ExtraTenant,
				ValueExpression: fmt.Sprintf("has(claims.%[1]s) ? claims.%[1]s : \"\"", celName(ic.TenantClaim))})
		}
		if r := ic.RolesClaim; r != "" {
			// A string of roles is split on spaces; .map(r, r) makes the
			// list one the API server reads as strings (a split list as is
			// is refused there).
			j.ClaimMappings.Extra = append(j.ClaimMappings.Extra, apiserverv1.ExtraMapping{Key: ExtraRoles,
				ValueExpression: fmt.Sprintf("has(claims.%[1]s) ? (type(claims.%[1]s) == string ? claims.%[1]s.split(\" \").map(r, r) : claims.%[1]s) : []", celName(r))})
		}
		out.JWT = append(out.JWT, j)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, warnings, err
	}
	doc, err = yaml.Marshal(out)
	if err != nil {
		return nil, warnings, err
	}
	if _, err := Parse(doc); err != nil {
		return nil, warnings, fmt.Errorf("the converted configuration does not load: %w", err)
	}
	return doc, warnings, nil
}

// celName is a claim name as a CEL field selection, escaped as the API
// server unescapes it (k8s.io/apiserver/pkg/cel.Escape: foo.bar is
// foo__dot__bar).
func celName(claim string) string {
	if e, ok := k8scel.Escape(claim); ok {
		return e
	}
	return claim // not escapable: the expression will not compile, and the read-back says so
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
