// Package authconfig reads a Kubernetes structured authentication
// configuration (an AuthenticationConfiguration, the file of the API
// server's --authentication-config) into issuers for package authn/oidc:
// decoded, defaulted and validated by the API server's own code, each
// issuer's claim mappings and validation rules compiled by its CEL
// compiler and applied as it applies them.
//
// It is apart from authn/oidc so that a program verifying tokens against
// issuers it configures in code, or with TokenReview (authn/kube), links
// neither k8s.io/apiserver nor cel-go.
//
//	cfg, err := authconfig.Load("/etc/callerauth/authentication.yaml")
//	if err != nil { ... }                 // the file cannot be honoured: stop
//	auth, err := oidc.New(cfg)
//
// [NewReloading] follows the file as the API server does.
package authconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	celast "github.com/google/cel-go/common/ast"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiserver "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/install"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"

	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// The extra keys a mapping gives the tenant and the roles of a caller
// under ([authn.Caller].Tenant and Roles).
const (
	ExtraTenant = "callerauth.dev/tenant"
	ExtraRoles  = "callerauth.dev/roles"
)

// kubernetesSigningAlgorithms are the algorithms the API server accepts
// from the issuers of an AuthenticationConfiguration (its
// oidc.AllValidSigningAlgorithms): EdDSA is not among them.
var kubernetesSigningAlgorithms = []string{"ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "RS256", "RS384", "RS512"}

var (
	configScheme = runtime.NewScheme()
	configCodecs = serializer.NewCodecFactory(configScheme, serializer.EnableStrict)
)

func init() { install.Install(configScheme) }

// Is reports whether doc (YAML or JSON) says it is a Kubernetes
// AuthenticationConfiguration, so that one flag can take either that or
// the older issuers file (oidc.LoadConfigFile).
func Is(doc []byte) bool {
	var meta struct {
		Kind string `json:"kind"`
	}
	j, err := ijson.FromYAML(doc)
	if err != nil {
		return false
	}
	return json.Unmarshal(j, &meta) == nil && meta.Kind == "AuthenticationConfiguration"
}

// Load reads the issuers from a Kubernetes structured authentication
// configuration (apiserver.config.k8s.io/v1, v1beta1 or v1alpha1
// AuthenticationConfiguration) of at most oidc.MaxConfigBytes, the file a
// platform team gives its API server's --authentication-config: decoded
// strictly with the API server's own scheme, defaulted and validated with
// its own validation, every CEL expression compiled with its own
// compiler. What the API server would accept but callerauth cannot
// honour is refused, naming the field; nothing is ignored.
func Load(path string) (oidc.Config, error) {
	b, err := oidc.ReadConfigFile(path)
	if err != nil {
		return oidc.Config{}, err
	}
	cfg, err := Parse(b)
	if err != nil {
		return oidc.Config{}, fmt.Errorf("authconfig: %s: %w", path, err)
	}
	return cfg, nil
}

// NewReloading is oidc.NewReloading over an AuthenticationConfiguration
// file: cfg.Parse is [Parse].
func NewReloading(cfg oidc.ReloadingConfig) (*oidc.Reloading, error) {
	cfg.Parse = Parse
	return oidc.NewReloading(cfg)
}

// Parse is [Load] of the file's contents.
func Parse(doc []byte) (oidc.Config, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return oidc.Config{}, errors.New("empty AuthenticationConfiguration")
	}
	// A key written twice is refused before the API server's decoder,
	// which would keep the last.
	if _, err := ijson.FromYAML(doc); err != nil {
		return oidc.Config{}, err
	}
	obj, err := runtime.Decode(configCodecs.UniversalDecoder(), doc)
	if err != nil {
		return oidc.Config{}, err
	}
	ac, ok := obj.(*apiserver.AuthenticationConfiguration)
	if !ok {
		return oidc.Config{}, fmt.Errorf("want an AuthenticationConfiguration, got %T", obj)
	}
	compiler := authenticationcel.NewDefaultCompiler()
	if errs := apiservervalidation.ValidateAuthenticationConfiguration(compiler, ac, nil); len(errs) > 0 {
		return oidc.Config{}, errs.ToAggregate()
	}
	var refused field.ErrorList
	if ac.Anonymous != nil {
		refused = append(refused, field.Forbidden(field.NewPath("anonymous"), "callerauth authenticates bearer tokens only; it has no anonymous access to configure"))
	}
	if len(ac.JWT) == 0 {
		refused = append(refused, field.Required(field.NewPath("jwt"), "callerauth needs at least one issuer"))
	}
	cfg := oidc.Config{}
	for i, jwt := range ac.JWT {
		path := field.NewPath("jwt").Index(i)
		if jwt.Issuer.EgressSelectorType != "" {
			refused = append(refused, field.Forbidden(path.Child("issuer", "egressSelectorType"),
				"callerauth has no egress selector: it reaches the issuer directly; remove the field"))
		}
		mapper, errs := apiservervalidation.CompileAndValidateJWTAuthenticator(compiler, jwt, nil)
		if len(errs) > 0 {
			refused = append(refused, errs...)
			continue
		}
		cfg.Issuers = append(cfg.Issuers, oidc.IssuerConfig{
			Issuer: jwt.Issuer.URL, DiscoveryDocumentURL: jwt.Issuer.DiscoveryURL, Audiences: slices.Clone(jwt.Issuer.Audiences),
			Algorithms: slices.Clone(kubernetesSigningAlgorithms), CertificateAuthority: jwt.Issuer.CertificateAuthority,
			Mapping: &rules{spec: jwt, cel: mapper},
		})
	}
	if len(refused) > 0 {
		return oidc.Config{}, refused.ToAggregate()
	}
	if err := cfg.Validate(); err != nil {
		return oidc.Config{}, err
	}
	return cfg, nil
}

// ConstantExtra returns the value an AuthenticationConfiguration issuer
// (one [Load] made) maps the extra key to when that mapping is one string literal (the
// same for every token it signs), and false when the issuer has no such
// mapping (none, or one that reads the claims). A service whose isolation
// rests on the issuer alone (the vmafx controller: one tenant per issuer)
// requires it.
func ConstantExtra(ic oidc.IssuerConfig, key string) (string, bool) {
	r, ok := ic.Mapping.(*rules)
	if !ok {
		return "", false
	}
	for _, e := range r.spec.ClaimMappings.Extra {
		if e.Key != key {
			continue
		}
		res, err := authenticationcel.NewDefaultCompiler().CompileClaimsExpression(&authenticationcel.ExtraMappingExpression{Key: e.Key, Expression: e.ValueExpression})
		if err != nil || res.AST == nil {
			return "", false
		}
		x := res.AST.NativeRep().Expr()
		if x.Kind() != celast.LiteralKind {
			return "", false
		}
		s, ok := x.AsLiteral().Value().(string)
		return s, ok && s != ""
	}
	return "", false
}
