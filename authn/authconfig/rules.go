package authconfig

import (
	"context"
	"encoding/json"
	"fmt"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	apiserver "k8s.io/apiserver/pkg/apis/apiserver"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	k8scel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/lazy"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// rules are one issuer's part of an AuthenticationConfiguration: the
// claim validation rules, the claim mappings and the user validation
// rules, their expressions compiled by the API server's CEL compiler.
// identity applies them in the API server's order, to the same inputs and
// with the same outcomes (test/authn compares the two on a matrix of
// tokens against a real kube-apiserver).
type rules struct {
	spec apiserver.JWTAuthenticator
	cel  authenticationcel.CELMapper
}

// Identity makes the caller's username, uid, groups and extra from the
// verified payload, then applies the validation rules. Every failure is
// token_invalid: the token says who it is, and that is not accepted.
func (r *rules) Identity(ctx context.Context, payload []byte, caller *authn.Caller) error {
	c := map[string]json.RawMessage{}
	if err := ijson.Members(payload, func(name, v []byte) error {
		c[string(name)] = v
		return nil
	}); err != nil {
		return authn.Fail(authn.TokenInvalid, "token: claims: %v", err)
	}
	var claims traits.Mapper
	m := r.cel
	if m.Username != nil || m.Groups != nil || m.UID != nil || m.Extra != nil || m.ClaimValidationRules != nil {
		claims = claimsValue(c)
	}
	var err error
	if caller.Username, err = r.username(ctx, c, claims); err != nil {
		return err
	}
	if caller.Groups, err = r.groups(ctx, c, claims); err != nil {
		return err
	}
	if caller.UID, err = r.uid(ctx, c, claims); err != nil {
		return err
	}
	if caller.Extra, err = r.extra(ctx, c, claims); err != nil {
		return err
	}
	for _, rule := range r.spec.ClaimValidationRules {
		if rule.Claim == "" {
			continue
		}
		raw, ok := c[rule.Claim]
		var v string
		if !ok {
			return authn.Fail(authn.TokenInvalid, "required claim %s is not in the token", rule.Claim)
		}
		if err := json.Unmarshal(raw, &v); err != nil || v != rule.RequiredValue {
			return authn.Fail(authn.TokenInvalid, "claim %s is not the required value", rule.Claim)
		}
	}
	if m.ClaimValidationRules != nil {
		results, err := m.ClaimValidationRules.EvalClaimMappings(ctx, claims)
		if err != nil {
			return authn.Fail(authn.TokenInvalid, "claim validation: %v", err)
		}
		if err := allTrue(results, func(a authenticationcel.ExpressionAccessor) string {
			if c, ok := a.(*authenticationcel.ClaimValidationCondition); ok {
				return c.Message
			}
			return ""
		}); err != nil {
			return authn.Fail(authn.TokenInvalid, "claim validation: %v", err)
		}
	}
	if m.UserValidationRules != nil {
		results, err := m.UserValidationRules.EvalUser(ctx, userValue(caller))
		if err != nil {
			return authn.Fail(authn.TokenInvalid, "user validation: %v", err)
		}
		if err := allTrue(results, func(a authenticationcel.ExpressionAccessor) string {
			if c, ok := a.(*authenticationcel.UserValidationCondition); ok {
				return c.Message
			}
			return ""
		}); err != nil {
			return authn.Fail(authn.TokenInvalid, "user validation: %v", err)
		}
	}
	return tenantAndRoles(caller)
}

// tenantAndRoles reads the tenant and the roles from the mapped extra.
func tenantAndRoles(caller *authn.Caller) error {
	switch t := caller.Extra[ExtraTenant]; len(t) {
	case 0:
	case 1:
		caller.Tenant = t[0]
	default:
		return authn.Fail(authn.TokenInvalid, "extra %s maps to %d values; a caller has one tenant", ExtraTenant, len(t))
	}
	caller.Roles = caller.Extra[ExtraRoles]
	return nil
}

func (r *rules) username(ctx context.Context, c map[string]json.RawMessage, claims traits.Mapper) (string, error) {
	if r.cel.Username != nil {
		res, err := r.cel.Username.EvalClaimMapping(ctx, claims)
		if err != nil {
			return "", authn.Fail(authn.TokenInvalid, "username expression: %v", err)
		}
		s, ok := res.EvalResult.Value().(string)
		if res.EvalResult.Type() != celgo.StringType || !ok {
			return "", authn.Fail(authn.TokenInvalid, "username expression must return a string")
		}
		if s == "" {
			return "", authn.Fail(authn.TokenInvalid, "the username expression gave an empty username")
		}
		return s, nil
	}
	mapping := r.spec.ClaimMappings.Username
	var name string
	raw, ok := c[mapping.Claim]
	if !ok {
		return "", authn.Fail(authn.TokenInvalid, "username claim %q is not in the token", mapping.Claim)
	}
	if err := json.Unmarshal(raw, &name); err != nil {
		return "", authn.Fail(authn.TokenInvalid, "username claim %q is not a string", mapping.Claim)
	}
	if mapping.Claim == "email" {
		// A present email_verified must be true (OpenID Connect Core §5.1).
		if raw, ok := c["email_verified"]; ok {
			var verified bool
			if err := json.Unmarshal(raw, &verified); err != nil {
				return "", authn.Fail(authn.TokenInvalid, "email_verified is not a boolean")
			}
			if !verified {
				return "", authn.Fail(authn.TokenInvalid, "email not verified")
			}
		}
	}
	if mapping.Prefix != nil {
		name = *mapping.Prefix + name
	}
	if name == "" {
		return "", authn.Fail(authn.TokenInvalid, "username claim %q is empty", mapping.Claim)
	}
	return name, nil
}

func (r *rules) groups(ctx context.Context, c map[string]json.RawMessage, claims traits.Mapper) ([]string, error) {
	mapping := r.spec.ClaimMappings.Groups
	if mapping.Claim != "" {
		if raw, ok := c[mapping.Claim]; ok {
			// A string is one group, as the API server reads it.
			var groups []string
			if err := json.Unmarshal(raw, &groups); err != nil {
				var one string
				if err := json.Unmarshal(raw, &one); err != nil {
					return nil, authn.Fail(authn.TokenInvalid, "groups claim %q is neither a string nor a list of strings", mapping.Claim)
				}
				groups = []string{one}
			}
			if mapping.Prefix != nil && *mapping.Prefix != "" {
				for i := range groups {
					groups[i] = *mapping.Prefix + groups[i]
				}
			}
			return groups, nil
		}
	}
	if r.cel.Groups == nil {
		return nil, nil
	}
	res, err := r.cel.Groups.EvalClaimMapping(ctx, claims)
	if err != nil {
		return nil, authn.Fail(authn.TokenInvalid, "groups expression: %v", err)
	}
	groups, err := stringsOf(res.EvalResult)
	if err != nil {
		return nil, authn.Fail(authn.TokenInvalid, "groups expression: %v", err)
	}
	return groups, nil
}

func (r *rules) uid(ctx context.Context, c map[string]json.RawMessage, claims traits.Mapper) (string, error) {
	if claim := r.spec.ClaimMappings.UID.Claim; claim != "" {
		var uid string
		raw, ok := c[claim]
		if !ok || json.Unmarshal(raw, &uid) != nil {
			return "", authn.Fail(authn.TokenInvalid, "uid claim %q is missing or not a string", claim)
		}
		return uid, nil
	}
	if r.cel.UID == nil {
		return "", nil
	}
	res, err := r.cel.UID.EvalClaimMapping(ctx, claims)
	if err != nil {
		return "", authn.Fail(authn.TokenInvalid, "uid expression: %v", err)
	}
	uid, ok := res.EvalResult.Value().(string)
	if res.EvalResult.Type() != celgo.StringType || !ok {
		return "", authn.Fail(authn.TokenInvalid, "uid expression must return a string")
	}
	return uid, nil
}

func (r *rules) extra(ctx context.Context, c map[string]json.RawMessage, claims traits.Mapper) (map[string][]string, error) {
	extra := map[string][]string{}
	if raw, ok := c["jti"]; ok {
		var jti string
		if json.Unmarshal(raw, &jti) == nil && jti != "" {
			extra[user.CredentialIDKey] = []string{"JTI=" + jti}
		}
	}
	if r.cel.Extra == nil {
		return extra, nil
	}
	results, err := r.cel.Extra.EvalClaimMappings(ctx, claims)
	if err != nil {
		return nil, authn.Fail(authn.TokenInvalid, "extra expression: %v", err)
	}
	for _, res := range results {
		mapping, ok := res.ExpressionAccessor.(*authenticationcel.ExtraMappingExpression)
		if !ok {
			return nil, authn.Fail(authn.TokenInvalid, "extra expression of an unexpected kind")
		}
		values, err := stringsOf(res.EvalResult)
		if err != nil {
			return nil, authn.Fail(authn.TokenInvalid, "extra %s: %v", mapping.Key, err)
		}
		if len(values) > 0 {
			extra[mapping.Key] = values
		}
	}
	return extra, nil
}

// stringsOf reads what a groups or extra expression returned: a string
// (one value; "" none), a list of strings ("" elements dropped) or null
// (none); anything else is an error.
func stringsOf(v ref.Val) ([]string, error) {
	const want = "expression must return a string or a list of strings"
	switch v.Type().TypeName() {
	case celgo.StringType.TypeName():
		if s, _ := v.Value().(string); s != "" {
			return []string{s}, nil
		}
		return nil, nil
	case celgo.NullType.TypeName():
		return nil, nil
	case celgo.ListType(nil).TypeName():
	default:
		return nil, fmt.Errorf("%s", want)
	}
	var out []string
	add := func(e any) error {
		s, ok := e.(string)
		if !ok {
			return fmt.Errorf("%s", want)
		}
		if s != "" {
			out = append(out, s)
		}
		return nil
	}
	switch l := v.Value().(type) {
	case []any:
		for _, e := range l {
			if err := add(e); err != nil {
				return nil, err
			}
		}
	case []ref.Val:
		for _, e := range l {
			if err := add(e.Value()); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("%s", want)
	}
	return out, nil
}

// allTrue requires every validation result to be true; a false one is an
// error with the rule's expression and message.
func allTrue(results []authenticationcel.EvaluationResult, message func(authenticationcel.ExpressionAccessor) string) error {
	for _, res := range results {
		b, ok := res.EvalResult.Value().(bool)
		if res.EvalResult.Type() != celgo.BoolType || !ok {
			return fmt.Errorf("validation expression must return a boolean")
		}
		if !b {
			return fmt.Errorf("validation expression '%s' failed: %s", res.ExpressionAccessor.GetExpression(), message(res.ExpressionAccessor))
		}
	}
	return nil
}

// claimsValue is the CEL variable claims: every member of the payload,
// each decoded (as encoding/json decodes into any) only when an
// expression reads it. Names escaped for CEL (__dot__, __dash__, …) find
// their claims, at every depth.
func claimsValue(c map[string]json.RawMessage) traits.Mapper {
	m := lazy.NewMapValue(types.NewObjectType("kubernetes.claims"))
	for name, raw := range c {
		m.Append(name, func(*lazy.MapValue) ref.Val {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return types.NewErr("claim %q: %v", name, err)
			}
			return unescaping(types.DefaultTypeAdapter.NativeToValue(v))
		})
	}
	return m
}

// userValue is the CEL variable user of the user validation rules.
func userValue(c *authn.Caller) traits.Mapper {
	m := lazy.NewMapValue(types.NewObjectType("kubernetes.UserInfo"))
	for name, v := range map[string]any{"username": c.Username, "uid": c.UID, "groups": c.Groups, "extra": c.Extra} {
		m.Append(name, func(*lazy.MapValue) ref.Val { return unescaping(types.DefaultTypeAdapter.NativeToValue(v)) })
	}
	return m
}

// unescaping wraps maps and lists so that a key CEL sees escaped
// (claims.foo__dot__bar) finds the member named with the character
// (foo.bar), in nested objects and arrays too.
func unescaping(v ref.Val) ref.Val {
	switch v := v.(type) {
	case traits.Mapper:
		return unescapingMap{v}
	case traits.Lister:
		return unescapingList{v}
	}
	return v
}

type unescapingMap struct{ traits.Mapper }

func (m unescapingMap) Find(key ref.Val) (ref.Val, bool) {
	if s, ok := key.(types.String); ok {
		if name, ok := k8scel.Unescape(string(s)); ok && name != string(s) {
			key = types.String(name)
		}
	}
	v, found := m.Mapper.Find(key)
	return unescaping(v), found
}

type unescapingList struct{ traits.Lister }

func (l unescapingList) Get(index ref.Val) ref.Val { return unescaping(l.Lister.Get(index)) }
