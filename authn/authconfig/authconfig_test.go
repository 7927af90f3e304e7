package authconfig_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/kit/scrape"
)

// indent indents every line of s by n spaces (a PEM block in YAML).
func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n"+pad)
}

// tenantConfig is an AuthenticationConfiguration of one dev issuer in
// tenant mode, as a platform team writes it for its API server, with the
// tenant and the roles as extra keys.
func tenantConfig(t *testing.T, iss *devissuer.Issuer, discovery string) string {
	t.Helper()
	ca, err := os.ReadFile(iss.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %s
    discoveryURL: %s/.well-known/openid-configuration
    certificateAuthority: |
%s
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
      claim: groups
      prefix: "tenant-a:"
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
`, iss.Issuer(), discovery, indent(string(ca), 6))
}

func TestAuthenticationConfiguration(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	p := filepath.Join(t.TempDir(), "authn.yaml")
	if err := os.WriteFile(p, []byte(tenantConfig(t, iss, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := authconfig.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	auth := newAuth(t, cfg)
	mint := func(sub string, aud string, claims map[string]any) string {
		t.Helper()
		if claims == nil {
			claims = map[string]any{}
		}
		if _, ok := claims["hd"]; !ok {
			claims["hd"] = "tenant-a.example"
		}
		tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: sub, Audiences: []string{aud}, Claims: claims})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	c, err := auth.Authenticate(context.Background(), mint("alice", "vmafx-controller", map[string]any{
		"scp": "vmafx:reader vmafx:submitter", "groups": []string{"dev", "ops"}, "team.name": "video"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Username != "tenant-a:alice" || c.UID != "alice" || fmt.Sprint(c.Groups) != "[tenant-a:dev tenant-a:ops]" ||
		c.Tenant != "tenant-a" || fmt.Sprint(c.Roles) != "[vmafx:reader vmafx:submitter]" ||
		fmt.Sprint(c.Extra["example.com/team"]) != "[video]" || !strings.HasPrefix(c.Extra["authentication.kubernetes.io/credential-id"][0], "JTI=") {
		t.Fatalf("caller %+v", c)
	}
	// A string groups claim is one group; a second audience under MatchAny.
	c, err = auth.Authenticate(context.Background(), mint("bob", "other-service", map[string]any{"groups": "dev"}))
	if err != nil || fmt.Sprint(c.Groups) != "[tenant-a:dev]" || c.Roles != nil || c.Extra["example.com/team"] != nil {
		t.Fatalf("bob: %+v %v", c, err)
	}
	for name, tok := range map[string]string{
		"a claim validation rule":         mint("mallory", "vmafx-controller", nil),
		"a required claim's value":        mint("carol", "vmafx-controller", map[string]any{"hd": "evil.example"}),
		"a user validation rule":          mint("system:admin", "vmafx-controller", nil),
		"another audience":                mint("alice", "someone-else", nil),
		"groups neither string nor list":  mint("alice", "vmafx-controller", map[string]any{"groups": 7}),
		"an extra expression's bad value": mint("alice", "vmafx-controller", map[string]any{"team.name": 7}),
	} {
		if c, err := auth.Authenticate(context.Background(), tok); err == nil || authn.ReasonOf(err) != authn.TokenInvalid {
			t.Errorf("%s: %+v %v; want token_invalid", name, c, err)
		}
	}
}

// TestAuthenticationConfigurationRefusals: the API server's own validation
// (an http issuer, a username claim without prefix, a CEL expression that
// does not compile, a key written twice), and what the API server accepts
// but callerauth cannot honour, each named by its field.
func TestAuthenticationConfigurationRefusals(t *testing.T) {
	head := "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n"
	ok := "jwt:\n- issuer:\n    url: https://a.example\n    audiences: [x]\n  claimMappings:\n    username:\n      expression: claims.sub\n"
	for name, c := range map[string]struct{ doc, want string }{
		"http issuer":         {strings.Replace(ok, "https://", "http://", 1), "jwt[0].issuer.url"},
		"claim without prefx": {strings.Replace(ok, "expression: claims.sub", "claim: sub", 1), "jwt[0].claimMappings.username.prefix"},
		"CEL not compiling":   {strings.Replace(ok, "claims.sub", "claims.sub +", 1), "jwt[0].claimMappings.username.expression"},
		"no audiences":        {strings.Replace(ok, "audiences: [x]", "audiences: []", 1), "jwt[0].issuer.audiences"},
		"egress selector":     {strings.Replace(ok, "audiences: [x]", "audiences: [x]\n    egressSelectorType: cluster", 1), "jwt[0].issuer.egressSelectorType"},
		"anonymous":           {ok + "anonymous:\n  enabled: true\n  conditions:\n  - path: /livez\n", "anonymous"},
		"unknown field":       {strings.Replace(ok, "audiences: [x]", "audiences: [x]\n    audience: y", 1), `unknown field "jwt[0].issuer.audience"`},
		"key twice":           {strings.Replace(ok, "audiences: [x]", "audiences: [x]\n    audiences: [y]", 1), `"audiences" already set`},
		"no issuer":           {"jwt: []\n", "jwt"},
		"not the kind":        {"apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers: []\n", "AuthenticationConfiguration"},
	} {
		doc := c.doc
		if !strings.HasPrefix(doc, "apiVersion") {
			doc = head + doc
		}
		if _, err := authconfig.Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %q", name, err, c.want)
		}
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	_ = os.WriteFile(big, []byte(head+ok+"# "+strings.Repeat("x", oidc.MaxConfigBytes)+"\n"), 0o600)
	if _, err := authconfig.Load(big); err == nil || !strings.Contains(err.Error(), "over 4194304 bytes") {
		t.Errorf("an oversize file: %v", err)
	}
	if !authconfig.Is([]byte(head+ok)) || authconfig.Is([]byte(`{"issuers": []}`)) {
		t.Fatal("authconfig.Is")
	}
	if _, err := authconfig.Parse([]byte(head + ok)); err != nil {
		t.Fatal(err)
	}
}

// TestReloadKeepsTheLastGoodConfiguration: a changed file takes over from
// the next verification; a broken one is refused and counted, and the last
// good one stays in force; a cached caller of an issuer a reload removed
// is revoked.
func TestReloadKeepsTheLastGoodConfiguration(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	p := filepath.Join(t.TempDir(), "authn.yaml")
	good := tenantConfig(t, iss, srv.URL)
	write := func(s string) {
		t.Helper()
		// A new inode, as a ConfigMap update or an editor's rename gives.
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	write(good)
	r, err := authconfig.NewReloading(oidc.ReloadingConfig{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collectors("svc")...)
	tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: "alice", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"hd": "tenant-a.example"}})
	if err != nil {
		t.Fatal(err)
	}
	verify := func() error {
		_, err := r.Authenticate(context.Background(), tok.Token)
		return err
	}
	if err := verify(); err != nil {
		t.Fatal(err)
	}
	first := r.Hash()
	write("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt: [{issuer: {url: http://plaintext.example}}]\n")
	r.Reload()
	if err := verify(); err != nil || r.Hash() != first {
		t.Fatalf("a broken file replaced the good one: %v (hash %s)", err, r.Hash())
	}
	// The file fixed, its audience changed: the old token is refused.
	write(strings.Replace(good, "[vmafx-controller, other-service]", "[other-service]", 1))
	r.Reload()
	if err := verify(); authn.ReasonOf(err) != authn.TokenInvalid || r.Hash() == first {
		t.Fatalf("after a good reload: %v (hash %s)", err, r.Hash())
	}
	got, err := scrape.Values(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got[`svc_caller_config_reloads_total{failure}`] != 1 || got[`svc_caller_config_reloads_total{success}`] != 1 || got[`svc_caller_config_info{`+r.Hash()+`}`] != 1 {
		t.Fatalf("metrics %v", got)
	}
	// The hash in the API server's form (its
	// apiserver_authentication_config_controller_last_config_info{hash}):
	// sha256:<hex of the file>.
	inForce, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("sha256:%x", sha256.Sum256(inForce)); r.Hash() != want {
		t.Fatalf("config hash %q; want %q", r.Hash(), want)
	}
	// The issuer's series, in the API server's shape: a verification
	// before the reload and one after, each failing or not; the keys
	// fetched once by each configuration.
	hash := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(iss.Issuer())))
	if got[`svc_caller_jwt_authenticator_latency_seconds{`+hash+`,success}`] != 2 || got[`svc_caller_jwt_authenticator_latency_seconds{`+hash+`,failure}`] != 1 ||
		got[`svc_caller_jwt_authenticator_jwks_fetch_last_timestamp_seconds{`+hash+`,success}`] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("per-issuer metrics %v", got)
	}
	// An issuer removed: its callers' cached verdicts are revoked.
	if r.Revoked(&authn.Caller{Issuer: "https://idp.tenant-a.example"}, time.Now()) != nil || r.Revoked(&authn.Caller{Issuer: "https://gone.example"}, time.Now()) == nil {
		t.Fatal("Revoked")
	}
}

// TestConvertMeansTheSame: an issuers configuration of the older form and
// its AuthenticationConfiguration give every token the same caller (the
// tenant claim's one announced difference aside).
func TestConvertMeansTheSame(t *testing.T) {
	iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	old := oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: []string{"vmafx-controller"},
		Tenant: "tenant-a", TenantClaim: "tenant.id", RolesClaim: "scp"}}}
	doc, warnings, err := authconfig.Convert(old)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "tenant_claim tenant.id") {
		t.Fatalf("warnings %q", warnings)
	}
	converted, err := authconfig.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	before, after := newAuth(t, old), newAuth(t, converted)
	for name, claims := range map[string]map[string]any{
		"roles as a string": {"tenant.id": "tenant-a", "scp": "vmafx:reader  vmafx:submitter", "groups": []string{"g1", "g2"}},
		"roles as a list":   {"tenant.id": "tenant-a", "scp": []string{"vmafx:node"}, "groups": "g"},
		"no roles":          {"tenant.id": "tenant-a"},
	} {
		tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: "alice", Audiences: []string{"vmafx-controller"}, Claims: claims})
		if err != nil {
			t.Fatal(err)
		}
		b, err1 := before.Authenticate(context.Background(), tok.Token)
		a, err2 := after.Authenticate(context.Background(), tok.Token)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v / %v", name, err1, err2)
		}
		if b.Username != a.Username || b.Tenant != a.Tenant || fmt.Sprint(b.Roles) != fmt.Sprint(a.Roles) || fmt.Sprint(b.Groups) != fmt.Sprint(a.Groups) {
			t.Errorf("%s: before %+v\nafter %+v", name, b, a)
		}
	}
	// The difference announced: a token without the tenant claim.
	tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: "alice", Audiences: []string{"vmafx-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := before.Authenticate(context.Background(), tok.Token); err != nil || c.Tenant != "" {
		t.Fatalf("before: %+v %v", c, err)
	}
	if _, err := after.Authenticate(context.Background(), tok.Token); authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("after: %v", err)
	}
	// What the newer form cannot say.
	if _, _, err := authconfig.Convert(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: "https://a.example", JWKSURL: "https://a.example/keys", Audiences: []string{"x"}}}}); err == nil || !strings.Contains(err.Error(), "jwks_url") {
		t.Fatalf("jwks_url: %v", err)
	}
}

// TestReloadWaitsForEveryIssuer: a valid file that adds an issuer whose
// discovery is unreachable and changes another issuer's username mapping
// does not take over — the old mapping stays in force and the failure is
// counted — until that issuer answers; then the same file takes over at the
// next look, as the API server does (it too waits for every issuer), so the
// two never map one token to two users meanwhile.
func TestReloadWaitsForEveryIssuer(t *testing.T) {
	issA, srvA := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	issB, addrB := downIssuer(t, "https://idp.tenant-b.example")
	p := filepath.Join(t.TempDir(), "authn.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
	write(tenantConfig(t, issA, srvA.URL))
	r, err := authconfig.NewReloading(oidc.ReloadingConfig{Path: p, Base: oidc.Config{Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collectors("svc")...)
	tok, err := issA.MintIdentity(devissuer.IdentityRequest{Subject: "alice", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"hd": "tenant-a.example"}})
	if err != nil {
		t.Fatal(err)
	}
	user := func() string {
		t.Helper()
		c, err := r.Authenticate(context.Background(), tok.Token)
		if err != nil {
			t.Fatal(err)
		}
		return c.Username
	}
	if u := user(); u != "tenant-a:alice" {
		t.Fatalf("before: %s", u)
	}
	first := r.Hash()
	b := tenantConfig(t, issB, "https://"+addrB)
	changed := strings.Replace(tenantConfig(t, issA, srvA.URL), `'"tenant-a:" + claims.sub'`, `'"renamed:" + claims.sub'`, 1) +
		b[strings.Index(b, "jwt:\n")+len("jwt:\n"):]
	write(changed)
	r.Reload()
	if u := user(); u != "tenant-a:alice" || r.Hash() != first {
		t.Fatalf("with issuer B down the new file took over: %s (hash %s)", u, r.Hash())
	}
	got, err := scrape.Values(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got[`svc_caller_config_reloads_total{failure}`] != 1 {
		t.Fatalf("the refused reload was not counted: %v", got)
	}
	// B comes up at its address: the same file takes over at the next look.
	srvB, err := issB.Serve(addrB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srvB.Close() })
	r.Reload()
	if u := user(); u != "renamed:alice" || r.Hash() == first {
		t.Fatalf("with issuer B up: %s (hash %s)", u, r.Hash())
	}
}

func newAuth(t *testing.T, cfg oidc.Config) *oidc.Authenticator {
	t.Helper()
	a, err := oidc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestReadyOnceEveryIssuerWasAsked: the reloading authenticator is not
// Ready before it runs; it is once every issuer of its file has been asked
// for its keys — what a service's listeners wait for (internal/serve's
// gates) — even with one issuer down, whose tenant must not hold the
// others' start: that one costs one Base.Timeout. The issuer that
// answered verifies its tokens.
func TestReadyOnceEveryIssuerWasAsked(t *testing.T) {
	issA, srvA := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	issB, addrB := downIssuer(t, "https://idp.tenant-b.example")
	b := tenantConfig(t, issB, "https://"+addrB)
	p := filepath.Join(t.TempDir(), "authn.yaml")
	if err := os.WriteFile(p, []byte(tenantConfig(t, issA, srvA.URL)+b[strings.Index(b, "jwt:\n")+len("jwt:\n"):]), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := authconfig.NewReloading(oidc.ReloadingConfig{Path: p, Base: oidc.Config{Timeout: time.Second},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Fatal("Ready before it ran")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); !r.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not Ready with every issuer asked")
		}
	}
	tok, err := issA.MintIdentity(devissuer.IdentityRequest{Subject: "alice", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"hd": "tenant-a.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Authenticate(context.Background(), tok.Token); err != nil {
		t.Fatalf("tenant A's token with B down: %v", err)
	}
}

// downIssuer opens a dev issuer named issuer and picks a loopback address
// for it where nothing listens yet: an identity provider that is down
// until the test serves it there.
func downIssuer(t *testing.T, issuer string) (*devissuer.Issuer, string) {
	t.Helper()
	iss, err := devissuer.Open(t.TempDir(), devissuer.Config{Issuer: issuer})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return iss, addr
}
