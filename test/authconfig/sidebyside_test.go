// Package authconfig_test gives one AuthenticationConfiguration to a real
// kube-apiserver (--authentication-config) and to callerauth
// (authconfig.Load), and compares their verdicts on a
// matrix of tokens from six issuers: three dev issuers in tenant mode, an
// Ory Hydra, and two key servers of this test whose key sets hold what RFC
// 7517 and 7518 say how to use.
package authconfig_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/forge"
	"github.com/callerauth/callerauth/internal/kit/hydra"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

// config is the file both read: issuer A (a dev issuer) with CEL username,
// groups, extra and validation rules; issuer B (a dev issuer) with claim
// mappings on email; issuer D (a dev issuer) with a prefixed username
// claim, unprefixed groups and the tenant from a claim; issuer C (Hydra)
// with its scopes as roles; issuers E and F (key servers of this test)
// whose key sets hold the keys RFC 7517 and 7518 say how to use: E RSA
// keys limited to an algorithm, for encryption, of 1024 bits; F a key of
// an unknown type beside a good one.
const config = `apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %[1]s
    discoveryURL: %[2]s/.well-known/openid-configuration
    certificateAuthority: |
%[3]s
    audiences: [vmafx-controller, other-service]
    audienceMatchPolicy: MatchAny
  claimValidationRules:
  - expression: 'claims.sub != "mallory"'
    message: mallory is not welcome
  - claim: hd
    requiredValue: tenant-a.example
  claimMappings:
    username:
      expression: '"tenant-a:" + claims.sub'
    groups:
      expression: 'has(claims.groups) ? claims.groups : []'
    uid:
      claim: sub
    extra:
    - key: callerauth.dev/tenant
      valueExpression: '"tenant-a"'
    - key: callerauth.dev/roles
      valueExpression: 'has(claims.scp) ? claims.scp.split(" ").map(r, r) : []'
    - key: example.com/team
      valueExpression: 'has(claims.team__dot__name) ? claims.team__dot__name : ""'
  userValidationRules:
  - expression: "!user.username.startsWith('tenant-a:system:')"
    message: no system users
- issuer:
    url: %[4]s
    discoveryURL: %[5]s/.well-known/openid-configuration
    certificateAuthority: |
%[6]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: email
      prefix: ""
    groups:
      claim: groups
      prefix: "b:"
    uid:
      expression: 'claims.sub'
    extra:
    - key: callerauth.dev/tenant
      valueExpression: '"tenant-b"'
- issuer:
    url: %[9]s
    discoveryURL: %[10]s/.well-known/openid-configuration
    certificateAuthority: |
%[11]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: sub
      prefix: "d:"
    groups:
      claim: roles
      prefix: ""
    extra:
    - key: callerauth.dev/tenant
      valueExpression: 'has(claims.tenants) ? claims.tenants : ["tenant-d"]'
- issuer:
    url: %[7]s
    certificateAuthority: |
%[8]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      expression: '"hydra:" + claims.sub'
    extra:
    - key: callerauth.dev/tenant
      valueExpression: '"tenant-c"'
    - key: callerauth.dev/roles
      valueExpression: 'has(claims.scp) ? claims.scp : []'
- issuer:
    url: %[12]s
    certificateAuthority: |
%[13]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: email
      prefix: "e:"
- issuer:
    url: %[14]s
    certificateAuthority: |
%[13]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: sub
      prefix: "f:"
- issuer:
    url: %[15]s
    certificateAuthority: |
%[13]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: sub
      prefix: "g:"
- issuer:
    url: %[16]s
    certificateAuthority: |
%[13]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: sub
      prefix: "h:"
- issuer:
    url: %[17]s
    certificateAuthority: |
%[13]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: sub
      prefix: "i:"
- issuer:
    url: %[18]s
    certificateAuthority: |
%[13]s
    audiences: [vmafx-controller]
  claimMappings:
    username:
      claim: sub
      prefix: "j:"
`

// verdict is what one side said of a token.
type verdict struct {
	OK       bool
	Username string
	UID      string
	Groups   []string
	Extra    map[string][]string
}

func (v verdict) String() string {
	if !v.OK {
		return "refused"
	}
	return fmt.Sprintf("%s uid=%q groups=%q extra=%v", v.Username, v.UID, v.Groups, v.Extra)
}

// block is a PEM bundle as a YAML block scalar's lines (six spaces in).
func block(pem string) string {
	const pad = "      "
	return pad + strings.ReplaceAll(strings.TrimSpace(pem), "\n", "\n"+pad)
}

// TestSideBySideWithTheAPIServer: the same file, the same tokens, the same
// outcome and identity — apart from the differences docs/authn.md lists,
// each asserted here as exactly that difference.
func TestSideBySideWithTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()

	// Two dev issuers in tenant mode, and a Hydra.
	devIssuer := func(name string) (*devissuer.Issuer, string, string) {
		iss, err := devissuer.Open(filepath.Join(dir, name), devissuer.Config{Issuer: "https://idp." + name + ".example"})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := iss.Serve("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		ca, err := os.ReadFile(iss.CAFile())
		if err != nil {
			t.Fatal(err)
		}
		return iss, srv.URL, string(ca)
	}
	issA, urlA, caA := devIssuer("tenant-a")
	issB, urlB, caB := devIssuer("tenant-b")
	issD, urlD, caD := devIssuer("tenant-d")
	hydraCA, err := pki.NewCA("hydra")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(dir, "hydra"), 0o700)
	h, err := hydra.Start(ctx, filepath.Join(dir, "hydra"), hydraCA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	caFile, err := hydraCA.WriteCA(filepath.Join(dir, "hydra-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caC, _ := os.ReadFile(caFile)

	// E and F: key servers of this test, with the key sets RFC 7517/7518
	// cases need.
	keysCA, err := pki.NewCA("keys")
	if err != nil {
		t.Fatal(err)
	}
	rsaKey := func(bits int) *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	good, rsOnly, enc, small := rsaKey(2048), rsaKey(2048), rsaKey(2048), rsaKey(1024)
	urlE := keyServer(t, keysCA, []any{
		jose.JSONWebKey{Key: &good.PublicKey, KeyID: "good", Use: "sig"},
		jose.JSONWebKey{Key: &rsOnly.PublicKey, KeyID: "rs-only", Algorithm: "RS256", Use: "sig"},
		jose.JSONWebKey{Key: &enc.PublicKey, KeyID: "enc", Use: "enc"},
		jose.JSONWebKey{Key: &small.PublicKey, KeyID: "small", Use: "sig"},
	})
	ecF, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	urlF := keyServer(t, keysCA, []any{
		jose.JSONWebKey{Key: &ecF.PublicKey, KeyID: "good", Algorithm: "ES256", Use: "sig"},
		map[string]string{"kty": "XYZ", "kid": "unknown", "x": "AAAA"},
	})
	// Key sets that are not I-JSON: G's names "keys" twice, the last
	// holding the key tokens are signed with; H's one key names its kid
	// twice, the last the kid tokens carry.
	ecG, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyG, err := jose.JSONWebKey{Key: &ecG.PublicKey, KeyID: "good", Algorithm: "ES256", Use: "sig"}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	urlG := keyServerRaw(t, keysCA, []byte(`{"keys":[],"keys":[`+string(keyG)+`]}`))
	urlH := keyServerRaw(t, keysCA, []byte(`{"keys":[`+strings.Replace(string(keyG), `"kid":"good"`, `"kid":"other","kid":"good"`, 1)+`]}`))
	// Key sets with a good key beside one the API server's library cannot
	// decode, which RFC 7517 §5 says to ignore: I's an EC key of a curve
	// no one knows, J's a key whose x5c is not a certificate.
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherJWK, err := jose.JSONWebKey{Key: &other.PublicKey, KeyID: "odd", Algorithm: "ES256", Use: "sig"}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	urlI := keyServerRaw(t, keysCA, []byte(`{"keys":[`+string(keyG)+`,`+strings.Replace(string(otherJWK), `"crv":"P-256"`, `"crv":"P-999"`, 1)+`]}`))
	urlJ := keyServerRaw(t, keysCA, []byte(`{"keys":[`+string(keyG)+`,`+strings.Replace(string(otherJWK), `"kid":"odd"`, `"kid":"odd","x5c":["bm90IGEgY2VydGlmaWNhdGU="]`, 1)+`]}`))

	file := filepath.Join(dir, "authentication-config.yaml")
	doc := fmt.Sprintf(config, issA.Issuer(), urlA, block(caA), issB.Issuer(), urlB, block(caB), h.Issuer, block(string(caC)), issD.Issuer(), urlD, block(caD),
		urlE, block(string(keysCA.PEM)), urlF, urlG, urlH, urlI, urlJ)
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}

	// callerauth, on the file.
	cfg, err := authconfig.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := oidc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The API server, on the same file.
	api, err := kubeapi.Start(ctx, "--authentication-config="+file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Stop)
	theirs := func(tok string) verdict {
		r, err := api.Client.AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenReview: %v", err)
		}
		if !r.Status.Authenticated {
			return verdict{}
		}
		v := verdict{OK: true, Username: r.Status.User.Username, UID: r.Status.User.UID, Groups: r.Status.User.Groups, Extra: map[string][]string{}}
		for k, e := range r.Status.User.Extra {
			v.Extra[k] = e
		}
		return v
	}
	mine := func(tok string) verdict {
		c, err := ours.Authenticate(ctx, tok)
		if err != nil {
			switch authn.ReasonOf(err) {
			case authn.TokenInvalid:
			case authn.SigningKeyUnknown:
				// A kid whose only key the key set's rules set aside: no
				// usable key has it (yet), which the verifier may retry.
				if !strings.Contains(err.Error(), "no key with kid") {
					t.Fatalf("callerauth: %v", err)
				}
			case authn.ValidatorError:
				// A key set that is not I-JSON (issuer G).
				if !strings.Contains(err.Error(), "appears more than once") {
					t.Fatalf("callerauth: %v", err)
				}
			default:
				t.Fatalf("callerauth: %v", err)
			}
			return verdict{}
		}
		v := verdict{OK: true, Username: c.Username, UID: c.UID, Groups: c.Groups, Extra: map[string][]string{}}
		for k, e := range c.Extra {
			v.Extra[k] = e
		}
		return v
	}

	mint := func(iss *devissuer.Issuer, sub, aud string, claims map[string]any, issued time.Time) string {
		t.Helper()
		tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: sub, Audiences: []string{aud}, Claims: claims, IssuedAt: issued, Lifetime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	a := func(sub string, claims map[string]any) string {
		if claims == nil {
			claims = map[string]any{}
		}
		if _, ok := claims["hd"]; !ok {
			claims["hd"] = "tenant-a.example"
		}
		return mint(issA, sub, "vmafx-controller", claims, time.Time{})
	}
	b := func(claims map[string]any) string { return mint(issB, "bob", "vmafx-controller", claims, time.Time{}) }
	// signed is a payload signed with issuer A's own key as it is: what the
	// issuer's minting will not write (a claim twice, distributed claims).
	keyA := signer(t, issA)
	signed := func(iss *devissuer.Issuer, key crypto.Signer, payload string) string {
		now := time.Now().Unix()
		p := strings.NewReplacer("ISS", iss.Issuer(), "NOW", fmt.Sprint(now), "LATER", fmt.Sprint(now+3600), "EXP", fmt.Sprint(now+7200)).Replace(payload)
		return forge.SignRaw([]byte(p), key, jose.ES256, iss.KeyID())
	}
	keyB := signer(t, issB)
	// padded is a good token of issuer A of exactly n bytes: a claim no
	// mapping reads filled out.
	padded := func(n int) string {
		mk := func(fill, extra int) string {
			return signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"pad":"`+
				strings.Repeat("x", fill)+`","q":"`+strings.Repeat("y", extra)+`"}`)
		}
		// Each 3 bytes of the payload are 4 of the token (the signature's
		// length does not change); the second claim makes up the rest.
		fill := (n-len(mk(0, 0)))*3/4 - 3
		for extra := range 8 {
			if tok := mk(fill, extra); len(tok) == n {
				return tok
			}
		}
		t.Fatalf("no token of exactly %d bytes", n)
		return ""
	}

	// The API server initializes its issuers in the background: wait until
	// it accepts a good token of each.
	d := func(sub string, claims map[string]any) string {
		return mint(issD, sub, "vmafx-controller", claims, time.Time{})
	}
	e := func(key *rsa.PrivateKey, kid string, alg jose.SignatureAlgorithm, sub string) string {
		now := time.Now()
		return forge.Sign(map[string]any{"iss": urlE, "sub": sub, "email": sub + "@e.example", "aud": []string{"vmafx-controller"}, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}, key, alg, kid)
	}
	warm := map[string]string{"A": a("warm", nil), "B": b(map[string]any{"email": "warm@b.example"}), "C": hydraToken(t, h, hydraCA, "warm", []string{"vmafx:reader"}), "D": d("warm", nil),
		"E": e(good, "good", jose.RS256, "warm")}
	for name, tok := range warm {
		deadline := time.Now().Add(90 * time.Second)
		for !theirs(tok).OK {
			if time.Now().After(deadline) {
				t.Fatalf("the API server never accepted issuer %s's token:\n%s", name, api.Log())
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	type row struct {
		name string
		tok  string
		// differs names the intended difference this row shows (the
		// API server's verdict, then callerauth's); "" for none.
		differs string
	}
	rows := []row{
		{"A: accepted, CEL username, groups, uid claim, extra", a("alice", map[string]any{"scp": "vmafx:reader vmafx:submitter", "groups": []string{"dev", "ops"}, "team.name": "video"}), ""},
		{"A: the second audience under MatchAny", mint(issA, "alice", "other-service", map[string]any{"hd": "tenant-a.example"}, time.Time{}), ""},
		{"A: another audience", mint(issA, "alice", "someone-else", map[string]any{"hd": "tenant-a.example"}, time.Time{}), ""},
		{"A: expired", mint(issA, "alice", "vmafx-controller", map[string]any{"hd": "tenant-a.example"}, time.Now().Add(-2*time.Hour)), ""},
		{"A: a claim validation expression false", a("mallory", nil), ""},
		{"A: a required claim with another value", a("carol", map[string]any{"hd": "evil.example"}), ""},
		{"A: a required claim absent", mint(issA, "carol", "vmafx-controller", nil, time.Time{}), ""},
		{"A: a user validation rule refusing", a("system:admin", nil), ""},
		{"A: groups a string (the expression returns it)", a("dan", map[string]any{"groups": "dev"}), ""},
		{"A: groups a number (not a string or list)", a("dan", map[string]any{"groups": 7}), ""},
		{"A: groups with an empty member", a("dan", map[string]any{"groups": []string{"dev", ""}}), ""},
		{"A: an extra expression's value not a string", a("erin", map[string]any{"team.name": 7}), ""},
		{"A: scp with two spaces", a("frank", map[string]any{"scp": "vmafx:reader  vmafx:node"}), ""},
		{"B: email, email_verified true", b(map[string]any{"email": "bob@b.example", "email_verified": true, "groups": []string{"dev"}}), ""},
		{"B: email, email_verified false", b(map[string]any{"email": "bob@b.example", "email_verified": false}), ""},
		{"B: email, no email_verified", b(map[string]any{"email": "bob@b.example", "groups": "dev"}), ""},
		{"B: email_verified a string", b(map[string]any{"email": "bob@b.example", "email_verified": "true"}), ""},
		{"B: no email", b(map[string]any{"groups": []string{"dev"}}), ""},
		{"B: email not a string", b(map[string]any{"email": 5}), ""},
		{"D: username claim with a prefix, groups claim without", d("dora", map[string]any{"roles": []string{"vmafx:reader", "ops"}}), ""},
		{"D: groups claim a string", d("dora", map[string]any{"roles": "ops"}), ""},
		{"D: no groups claim", d("dora", nil), ""},
		{"C: Hydra, client credentials, scopes as roles", hydraToken(t, h, hydraCA, "ci-c", []string{"vmafx:reader", "vmafx:submitter"}), ""},
		{"an issuer not in the file", mint(devIssuerToken(t, dir), "alice", "vmafx-controller", nil, time.Time{}), ""},
		// Where the API server's OIDC library refuses to decode the claims
		// (issue 42), callerauth refuses too.
		{"A: nonce a number", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"nonce":5}`), ""},
		{"A: at_hash a number", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"at_hash":5}`), ""},
		{"A: nonce null", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"nonce":null}`), ""},
		{"B: _claim_names a string", signed(issB, keyB, `{"iss":"ISS","sub":"ivan","email":"ivan@b.example","aud":["vmafx-controller"],"iat":NOW,"exp":EXP,"_claim_names":"x"}`), ""},
		{"A: _claim_names naming a source _claim_sources lacks", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,`+
			`"_claim_names":{"groups":"src9"},"_claim_sources":{"src1":{"endpoint":"https://127.0.0.1:1/claims"}}}`), ""},
		{"A: exp, and Exp in the past", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"Exp":1}`), ""},
		{"A: exp 2^62", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":4611686018427387904}`), ""},
		{"A: crit [b64] with b64 true", forge.SignRawWith([]byte(strings.NewReplacer("ISS", issA.Issuer(), "NOW", fmt.Sprint(time.Now().Unix()), "EXP", fmt.Sprint(time.Now().Add(time.Hour).Unix())).
			Replace(`{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP}`)), keyA, jose.ES256, issA.KeyID(), (&jose.SignerOptions{}).WithBase64(true)), ""},
		{"E: RS256 with a 2048-bit key", e(good, "good", jose.RS256, "erin"), ""},
		{"H: a key set whose key names its kid twice", forge.Sign(map[string]any{"iss": urlH, "sub": "hal", "aud": []string{"vmafx-controller"}, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, ecG, jose.ES256, "good"), ""},
		{"E: PS256 with the hash-length salt", e(good, "good", jose.PS256, "erin"), ""},
		// The intended differences.
		{"A: jti a number", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"jti":5}`), "registered claim type"},
		{"A: jti null", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"jti":null}`), "registered claim type"},
		{"B: sub null while the uid mapping reads it", signed(issB, keyB, `{"iss":"ISS","sub":null,"email":"bob@b.example","aud":["vmafx-controller"],"iat":NOW,"exp":EXP}`), ""},
		{"E: sub null, the username from email", forge.Sign(map[string]any{"iss": urlE, "sub": nil, "email": "erin@e.example", "aud": []string{"vmafx-controller"}, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, good, jose.RS256, "good"), "registered claim type"},
		{"A: nbf null", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"nbf":null}`), "registered claim type"},
		{"A: exp a quoted number", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":"EXP"}`), "registered claim type"},
		{"A: iat a quoted number", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":"NOW","exp":EXP}`), "registered claim type"},
		{"A: a newline inside the signature", newlineInSignature(a("jo", nil)), "compact serialization"},
		{"D: the tenant mapped to two values", d("dora", map[string]any{"tenants": []string{"t1", "t2"}}), "one tenant"},
		{"E: PS256 with the longest salt", forge.SignPSSMaxSalt(map[string]any{"iss": urlE, "sub": "erin", "email": "erin@e.example", "aud": []string{"vmafx-controller"}, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, good, "good"), "key use"},
		{"E: PS256 with a key whose JWK alg is RS256", e(rsOnly, "rs-only", jose.PS256, "erin"), "key use"},
		{"E: a key whose JWK use is enc", e(enc, "enc", jose.RS256, "erin"), "key use"},
		{"E: a 1024-bit RSA key", e(small, "small", jose.RS256, "erin"), "key use"},
		{"F: a good key beside a key of an unknown type", forge.Sign(map[string]any{"iss": urlF, "sub": "fay", "aud": []string{"vmafx-controller"}, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, ecF, jose.ES256, "good"), "unknown key type"},
		{"I: a good key beside an EC key of an unknown curve", forge.Sign(map[string]any{"iss": urlI, "sub": "ida", "aud": []string{"vmafx-controller"}, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, ecG, jose.ES256, "good"), "unknown key type"},
		{"J: a good key beside a key whose x5c is not a certificate", forge.Sign(map[string]any{"iss": urlJ, "sub": "jay", "aud": []string{"vmafx-controller"}, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, ecG, jose.ES256, "good"), "unknown key type"},
		{"A: nbf, and NBF (a claim the API server's library does not decode)", signed(issA, keyA, `{"iss":"ISS","sub":"jo","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP,"nbf":NOW,"NBF":1}`), "I-JSON"},
		{"A: a token of 16,385 bytes", padded(16385), "token size"},
		{"A: a token of 64 KiB", padded(64 << 10), "token size"},
		{"A: a token of 1 MiB", padded(1 << 20), "token size"},
		{"G: a key set naming keys twice", forge.Sign(map[string]any{"iss": urlG, "sub": "gil", "aud": []string{"vmafx-controller"}, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, ecG, jose.ES256, "good"), "I-JSON key set"},
		{"A: iat an hour in the future (no nbf)", signed(issA, keyA, `{"iss":"ISS","sub":"gina","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":LATER,"exp":EXP}`), "iat"},
		{"B: an empty email", b(map[string]any{"email": ""}), "empty username"},
		{"A: sub, and SUB", signed(issA, keyA, `{"iss":"ISS","sub":"harry","SUB":"root","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP}`), "I-JSON"},
		{"A: a claim named twice", signed(issA, keyA, `{"iss":"ISS","sub":"harry","sub":"root","aud":["vmafx-controller"],"hd":"tenant-a.example","iat":NOW,"exp":EXP}`), "I-JSON"},
		{"B: groups as a distributed claim", signed(issB, keyB, `{"iss":"ISS","sub":"ivan","email":"ivan@b.example","aud":["vmafx-controller"],"iat":NOW,"exp":EXP,`+
			`"_claim_names":{"groups":"src1"},"_claim_sources":{"src1":{"endpoint":"https://127.0.0.1:1/claims","access_token":"x"}}}`), "distributed claims"},
	}
	agree := 0
	for _, r := range rows {
		th, me := theirs(r.tok), mine(r.tok)
		// The API server adds system:authenticated to every user it
		// authenticates; the token says nothing of it (a difference listed
		// too, asserted on every accepted row).
		if th.OK {
			if !slices.Contains(th.Groups, "system:authenticated") {
				t.Errorf("%s: the API server's groups %q lack system:authenticated", r.name, th.Groups)
			}
			th.Groups = slices.DeleteFunc(slices.Clone(th.Groups), func(g string) bool { return g == "system:authenticated" })
			if len(th.Groups) == 0 {
				th.Groups = nil
			}
		}
		same := th.String() == me.String()
		t.Logf("%-52s API server: %s", r.name, th)
		if !same {
			t.Logf("%-52s callerauth: %s", "", me)
		}
		switch r.differs {
		case "":
			if same {
				agree++
			} else {
				t.Errorf("%s:\n  API server: %s\n  callerauth: %s", r.name, th, me)
			}
		case "iat", "I-JSON", "registered claim type", "compact serialization", "one tenant", "key use", "token size":
			if !th.OK || me.OK {
				t.Errorf("%s: want the API server to accept (%s) and callerauth to refuse (%s)", r.name, th, me)
			}
		case "empty username":
			if !th.OK || th.Username != "" || me.OK {
				t.Errorf("%s: want the API server to accept the user \"\" (%s) and callerauth to refuse (%s)", r.name, th, me)
			}
		case "I-JSON key set":
			if !th.OK || me.OK {
				t.Errorf("%s: want the API server to accept (it reads the last keys: %s) and callerauth to refuse the key set (%s)", r.name, th, me)
			}
		case "unknown key type":
			if th.OK || !me.OK {
				t.Errorf("%s: want the API server to refuse (it cannot decode the key set: %s) and callerauth to accept (%s)", r.name, th, me)
			}
		case "distributed claims":
			if th.OK || !me.OK || me.Groups != nil {
				t.Errorf("%s: want the API server to refuse (it fetches the claim source, which fails: %s) and callerauth to accept without groups (%s)", r.name, th, me)
			}
		}
	}
	differ := 0
	for _, r := range rows {
		if r.differs != "" {
			differ++
		}
	}
	if agree != len(rows)-differ {
		t.Errorf("callerauth and the kube-apiserver agree on %d of the %d tokens that should agree", agree, len(rows)-differ)
	}
	t.Logf("callerauth and the kube-apiserver agree on %d/%d tokens; %d more show exactly the intended differences (docs/authn.md)", agree, len(rows)-differ, differ)
	var used []string
	for _, r := range rows {
		if r.differs != "" && !slices.Contains(used, r.differs) {
			used = append(used, r.differs)
		}
	}
	holdTheTable(t, used, agree, len(rows)-differ, differ, len(rows))
}

// differenceRows are the rows of docs/authn.md's table of intended
// differences each kind of difference the side-by-side observes is
// listed in (the start of the row's first cell).
var differenceRows = map[string][]string{
	"iat":                   {"`iat` in the future"},
	"empty username":        {"a username claim that is empty"},
	"I-JSON":                {"claims not I-JSON"},
	"distributed claims":    {"distributed claims"},
	"registered claim type": {"a registered claim of another JSON type"},
	"compact serialization": {"a newline inside the token"},
	"one tenant":            {"`callerauth.dev/tenant` mapped to two values"},
	"key use":               {"RSASSA-PSS with a salt longer", "a key used for another algorithm", "a JWK with `use: enc`", "an RSA key under 2048 bits"},
	"I-JSON key set":        {"a discovery document or key set that is not I-JSON"},
	"unknown key type":      {"a key set with an entry of unknown `kty`"},
	"token size":            {"a token over 16 KiB"},
}

// differenceRowsElsewhere are the table's rows this test does not observe
// as a token's verdict, and where each is held.
var differenceRowsElsewhere = map[string]string{
	"the group `system:authenticated`": "asserted on every token the API server accepts, above",
	"`exp`":                            "one instant wide: the lifetime tests of package token",
	"a file with no issuer":            "TestConfigurationDifferences, against the API server's validation",
	"an issuer equal to the API server's own service-account": "TestConfigurationDifferences, against the API server's validation",
}

// holdTheTable holds docs/authn.md to what the side-by-side observed:
// every kind of difference it saw has its row in the table of intended
// differences, every row of the table is observed here or held
// elsewhere, and the figures the page gives are the test's.
func holdTheTable(t *testing.T, used []string, agree, shouldAgree, differ, tokens int) {
	t.Helper()
	b, err := os.ReadFile("../../docs/authn.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, table, ok := strings.Cut(doc, "**Intended differences from the API server**")
	if !ok {
		t.Fatal("docs/authn.md has no table of intended differences")
	}
	var firsts []string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| ---") {
			firsts = append(firsts, strings.TrimPrefix(line, "| "))
		} else if len(firsts) > 0 && !strings.HasPrefix(line, "|") {
			break
		}
	}
	if len(firsts) < 10 {
		t.Fatalf("docs/authn.md's table of intended differences has %d rows: its shape changed", len(firsts))
	}
	claimed := map[string]bool{}
	row := func(start string) bool {
		for _, f := range firsts {
			if strings.HasPrefix(f, start) {
				claimed[f] = true
				return true
			}
		}
		return false
	}
	for _, kind := range used {
		starts, ok := differenceRows[kind]
		if !ok {
			t.Errorf("the side-by-side observes the difference %q, which differenceRows does not place in docs/authn.md's table", kind)
		}
		for _, s := range starts {
			if !row(s) {
				t.Errorf("the side-by-side observes %q, but docs/authn.md's table has no row beginning %q", kind, s)
			}
		}
	}
	for start := range differenceRowsElsewhere {
		if !row(start) {
			t.Errorf("docs/authn.md's table has no row beginning %q", start)
		}
	}
	for _, f := range firsts {
		if !claimed[f] && !strings.HasPrefix(f, "| API server") && !strings.HasPrefix(f, " | API server") {
			if strings.Contains(f, "API server | callerauth") {
				continue // the header
			}
			t.Errorf("docs/authn.md lists a difference no test observes: %.80q", f)
		}
	}
	for _, want := range []string{fmt.Sprintf("about %d tokens", tokens), fmt.Sprintf("agree on\n%d/%d**", agree, shouldAgree), fmt.Sprintf("the other %d show", differ)} {
		if !strings.Contains(doc, want) && !strings.Contains(doc, strings.ReplaceAll(want, "\n", " ")) {
			t.Errorf("docs/authn.md does not say %q, what the side-by-side measured", want)
		}
	}
}

// keyServer serves an OIDC discovery document and a key set (keys, as
// JSON) over TLS under ca, and returns its URL: the issuer.
func keyServer(t *testing.T, ca *pki.CA, keys []any) string {
	t.Helper()
	jwks, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return keyServerRaw(t, ca, jwks)
}

// keyServerRaw is keyServer serving jwks as it is.
func keyServerRaw(t *testing.T, ca *pki.CA, jwks []byte) string {
	t.Helper()
	cfg, err := ca.ServerTLS(pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	var base string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": base, "jwks_uri": base + "/jwks", "response_types_supported": []string{"id_token"},
				"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256", "PS256", "ES256"}})
		case "/jwks":
			_, _ = w.Write(jwks)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	base = srv.URL
	return base
}

// newlineInSignature puts a newline in the middle of a token's signature
// segment: TokenReview carries it; no Authorization header could.
func newlineInSignature(tok string) string {
	i := strings.LastIndexByte(tok, '.') + 10
	return tok[:i] + "\n" + tok[i:]
}

// signer is a dev issuer's signing key.
func signer(t *testing.T, iss *devissuer.Issuer) crypto.Signer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(iss.StateDir(), "signing-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := pki.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		t.Fatalf("%T is not a signer", k)
	}
	return s
}

// devIssuerToken is a third dev issuer, in no configuration.
func devIssuerToken(t *testing.T, dir string) *devissuer.Issuer {
	iss, err := devissuer.Open(filepath.Join(dir, "stranger"), devissuer.Config{Issuer: "https://idp.stranger.example"})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

// hydraToken is a client-credentials access token of a new Hydra client
// with scopes, for the audience vmafx-controller.
func hydraToken(t *testing.T, h *hydra.Server, ca *pki.CA, id string, scopes []string) string {
	t.Helper()
	id += "-" + fmt.Sprint(time.Now().UnixNano())
	secret, err := h.Client(id, scopes, "vmafx-controller")
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {strings.Join(scopes, " ")}, "audience": {"vmafx-controller"}}
	req, err := http.NewRequest(http.MethodPost, h.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.AccessToken == "" {
		t.Fatalf("hydra token: %s %v", resp.Status, err)
	}
	return out.AccessToken
}
