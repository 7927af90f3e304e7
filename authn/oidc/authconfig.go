package oidc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	celast "github.com/google/cel-go/common/ast"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiserver "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/install"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"

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

// IsAuthenticationConfiguration reports whether doc (YAML or JSON) says it
// is a Kubernetes AuthenticationConfiguration, so that one flag can take
// either that or the older issuers file.
func IsAuthenticationConfiguration(doc []byte) bool {
	var meta struct {
		Kind string `json:"kind"`
	}
	j, err := ijson.FromYAML(doc)
	if err != nil {
		return false
	}
	return json.Unmarshal(j, &meta) == nil && meta.Kind == "AuthenticationConfiguration"
}

// LoadAuthenticationConfiguration reads the issuers from a Kubernetes
// structured authentication configuration (apiserver.config.k8s.io/v1,
// v1beta1 or v1alpha1 AuthenticationConfiguration), the file a platform
// team gives its API server's --authentication-config: decoded strictly
// with the API server's own scheme, defaulted and validated with its own
// validation, every CEL expression compiled with its own compiler. What
// the API server would accept but callerauth cannot honour is refused,
// naming the field; nothing is ignored.
func LoadAuthenticationConfiguration(path string) (Config, error) {
	b, err := readConfigFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := ParseAuthenticationConfiguration(b)
	if err != nil {
		return Config{}, fmt.Errorf("oidc: %s: %w", path, err)
	}
	return cfg, nil
}

// MaxConfigBytes bounds an AuthenticationConfiguration file: hundreds of
// issuers with their CA bundles fit.
const MaxConfigBytes = 4 << 20

// readConfigFile reads an AuthenticationConfiguration file of at most
// MaxConfigBytes.
func readConfigFile(path string) ([]byte, error) {
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
		return nil, fmt.Errorf("oidc: %s: over %d bytes; an AuthenticationConfiguration is at most that", path, MaxConfigBytes)
	}
	return b, nil
}

// ParseAuthenticationConfiguration is [LoadAuthenticationConfiguration] of
// the file's contents.
func ParseAuthenticationConfiguration(doc []byte) (Config, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return Config{}, errors.New("empty AuthenticationConfiguration")
	}
	// A key written twice is refused before the API server's decoder,
	// which would keep the last.
	if _, err := ijson.FromYAML(doc); err != nil {
		return Config{}, err
	}
	obj, err := runtime.Decode(configCodecs.UniversalDecoder(), doc)
	if err != nil {
		return Config{}, err
	}
	ac, ok := obj.(*apiserver.AuthenticationConfiguration)
	if !ok {
		return Config{}, fmt.Errorf("want an AuthenticationConfiguration, got %T", obj)
	}
	compiler := authenticationcel.NewDefaultCompiler()
	if errs := apiservervalidation.ValidateAuthenticationConfiguration(compiler, ac, nil); len(errs) > 0 {
		return Config{}, errs.ToAggregate()
	}
	var refused field.ErrorList
	if ac.Anonymous != nil {
		refused = append(refused, field.Forbidden(field.NewPath("anonymous"), "callerauth authenticates bearer tokens only; it has no anonymous access to configure"))
	}
	if len(ac.JWT) == 0 {
		refused = append(refused, field.Required(field.NewPath("jwt"), "callerauth needs at least one issuer"))
	}
	cfg := Config{}
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
		cfg.Issuers = append(cfg.Issuers, IssuerConfig{
			Issuer: jwt.Issuer.URL, DiscoveryDocumentURL: jwt.Issuer.DiscoveryURL, Audiences: slices.Clone(jwt.Issuer.Audiences),
			Algorithms: slices.Clone(kubernetesSigningAlgorithms), CertificateAuthority: jwt.Issuer.CertificateAuthority,
			rules: &rules{spec: jwt, cel: mapper},
		})
	}
	if len(refused) > 0 {
		return Config{}, refused.ToAggregate()
	}
	check := cfg
	check.Issuers = slices.Clone(cfg.Issuers)
	if err := check.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// ConstantExtra returns the value an AuthenticationConfiguration issuer
// maps the extra key to when that mapping is one string literal (the
// same for every token it signs), and false when the issuer has no such
// mapping (none, or one that reads the claims). A service whose isolation
// rests on the issuer alone (the vmafx controller: one tenant per issuer)
// requires it.
func (ic IssuerConfig) ConstantExtra(key string) (string, bool) {
	if ic.rules == nil {
		return "", false
	}
	for _, e := range ic.rules.spec.ClaimMappings.Extra {
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
