package authn_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/kit/forge"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
	"github.com/callerauth/callerauth/token"
)

const audience = "flex-auth"

// backend is one way of verifying one issuer's tokens.
type backend struct {
	name string
	// tokenReview backends see revocation.
	tokenReview bool
	// newAuth builds the authenticator with a clock.
	newAuth func(t *testing.T, now func() time.Time) authn.Authenticator
	fx      *fixture
}

// fixture is one issuer's world: a valid bound token and the means to mint
// more and to delete a pod.
type fixture struct {
	issuer string
	pub    crypto.PublicKey
	alg    jose.SignatureAlgorithm
	valid  string // bound to a scheduled pod, for audience
	want   authn.Caller
	mint   func(t *testing.T, audiences []string) string
	// deletePod mints a token bound to a new pod, has accept confirm it is
	// valid, deletes the pod, and returns the token.
	deletePod func(t *testing.T, accept func(string)) string
}

var (
	fixturesOnce  sync.Once
	devFx, kubeFx *fixture
	devSrvURL     string
	devIss        *devissuer.Issuer
	fixturesErr   error
)

func fixtures(t *testing.T) (*fixture, *fixture) {
	t.Helper()
	fixturesOnce.Do(func() {
		devFx, fixturesErr = devFixture()
		if fixturesErr == nil {
			kubeFx, fixturesErr = kubeFixture()
		}
	})
	if fixturesErr != nil {
		t.Fatal(fixturesErr)
	}
	return devFx, kubeFx
}

func devFixture() (*fixture, error) {
	dir, err := os.MkdirTemp("", "matrix-dev-")
	if err != nil {
		return nil, err
	}
	iss, err := devissuer.Open(dir, devissuer.Config{})
	if err != nil {
		return nil, err
	}
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		return nil, err
	}
	devIss, devSrvURL = iss, srv.URL
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "matrix", ServiceAccount: "caller", Audiences: []string{audience}, Lifetime: 10 * time.Minute, Pod: "caller-pod", Node: "node-a"})
	if err != nil {
		return nil, err
	}
	k := tok.Claims.Kubernetes
	fx := &fixture{
		issuer: iss.Issuer(), pub: iss.JWKS().Keys[0].Key, alg: jose.ES256, valid: tok.Token,
		want: authn.Caller{
			Username: "system:serviceaccount:matrix:caller", UID: k.ServiceAccount.UID,
			Groups:    authn.ServiceAccountGroups("matrix"),
			Audiences: []string{audience},
			PodName:   "caller-pod", PodUID: k.Pod.UID, NodeName: "node-a", NodeUID: k.Node.UID,
			CredentialID: "JTI=" + tok.Claims.ID, Issuer: iss.Issuer(),
			IssuedAt: tok.Claims.IssuedAt.Time(), Expiry: tok.Claims.Expiry.Time(),
		},
	}
	fx.mint = func(t *testing.T, auds []string) string {
		if len(auds) == 0 {
			auds = []string{iss.Issuer()} // the API audience, as TokenRequest defaults
		}
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "matrix", ServiceAccount: "caller", Audiences: auds, Lifetime: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	n := 0
	fx.deletePod = func(t *testing.T, accept func(string)) string {
		n++
		name := fmt.Sprintf("doomed-%d", n)
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "matrix", ServiceAccount: "caller", Audiences: []string{audience}, Pod: name, Node: "node-a"})
		if err != nil {
			t.Fatal(err)
		}
		accept(tok.Token)
		if err := iss.DeletePod("matrix", name); err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	return fx, nil
}

func kubeFixture() (*fixture, error) {
	ctx := context.Background()
	s := apiserver
	const ns = "matrix"
	if err := s.Namespace(ctx, ns); err != nil {
		return nil, err
	}
	saUID, err := s.ServiceAccount(ctx, ns, "caller")
	if err != nil {
		return nil, err
	}
	nodeUID, err := s.Node(ctx, "node-a")
	if err != nil {
		return nil, err
	}
	pod, err := s.Pod(ctx, ns, "caller-pod", "caller", "node-a")
	if err != nil {
		return nil, err
	}
	tok, err := s.Token(ctx, ns, "caller", []string{audience}, 600, pod)
	if err != nil {
		return nil, err
	}
	c, err := token.ReadClaims(tok)
	if err != nil {
		return nil, fmt.Errorf("the API server's token: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "sa.pub"))
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	fx := &fixture{
		issuer: kubeapi.Issuer, pub: pub, alg: jose.RS256, valid: tok,
		want: authn.Caller{
			Username: "system:serviceaccount:matrix:caller", UID: string(saUID),
			Groups:    authn.ServiceAccountGroups(ns),
			Audiences: []string{audience},
			PodName:   "caller-pod", PodUID: string(pod.UID), NodeName: "node-a", NodeUID: string(nodeUID),
			CredentialID: "JTI=" + c.ID, Issuer: kubeapi.Issuer, IssuedAt: c.Issued(), Expiry: c.ExpiresAt(),
		},
	}
	fx.mint = func(t *testing.T, auds []string) string {
		tok, err := s.Token(context.Background(), ns, "caller", auds, 600, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	n := 0
	fx.deletePod = func(t *testing.T, accept func(string)) string {
		n++
		name := fmt.Sprintf("doomed-%d", n)
		p, err := s.Pod(context.Background(), ns, name, "caller", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.Token(context.Background(), ns, "caller", []string{audience}, 600, p)
		if err != nil {
			t.Fatal(err)
		}
		accept(tok)
		if err := s.Client.CoreV1().Pods(ns).Delete(context.Background(), name, deleteNow()); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	return fx, nil
}

func backends(t *testing.T) []backend {
	dev, k := fixtures(t)
	devReviewer, err := os.ReadFile(devIss.ReviewerTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	devCA, err := os.ReadFile(devIss.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	tokenReview := func(rc *rest.Config) func(*testing.T, func() time.Time) authn.Authenticator {
		return func(t *testing.T, now func() time.Time) authn.Authenticator {
			a, err := kube.New(kube.Config{REST: rc, Audiences: []string{audience}, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	offline := func(ic oidc.IssuerConfig) func(*testing.T, func() time.Time) authn.Authenticator {
		return func(t *testing.T, now func() time.Time) authn.Authenticator {
			ic.Audiences = []string{audience}
			ic.Algorithms = []string{"RS256", "ES256"}
			a, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{ic}, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	return []backend{
		{name: "devissuer/TokenReview", tokenReview: true, fx: dev, newAuth: tokenReview(&rest.Config{
			Host: devSrvURL, BearerToken: strings.TrimSpace(string(devReviewer)), TLSClientConfig: rest.TLSClientConfig{CAData: devCA}})},
		{name: "devissuer/JWKS", fx: dev, newAuth: offline(oidc.IssuerConfig{Issuer: dev.issuer, DiscoveryURL: devSrvURL, CAFile: devIss.CAFile()})},
		{name: "kube-apiserver/TokenReview", tokenReview: true, fx: k, newAuth: tokenReview(apiserver.REST)},
		{name: "kube-apiserver/JWKS", fx: k, newAuth: offline(oidc.IssuerConfig{Issuer: kubeapi.Issuer, DiscoveryURL: apiserver.URL, CAFile: apiserver.CAFile})},
	}
}

// verdict runs the request pipeline's first two steps on Authorization
// header values: bearer, then the authenticator. It returns the caller or
// the stable reason of the refusal.
func verdict(ctx context.Context, a authn.Authenticator, header []string) (*authn.Caller, string) {
	id := guard.Identify(ctx, authn.Layer{Authenticator: a}, bearer.Parse(header))
	return id.Caller(), id.Reason().String()
}

func hdr(tok string) []string { return []string{"Bearer " + tok} }

func otherKey(alg jose.SignatureAlgorithm) crypto.Signer {
	if alg == jose.RS256 {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return k
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// TestAttackMatrix: every row is refused with the right reason by every
// backend, and nothing else is accepted.
func TestAttackMatrix(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			fx := b.fx
			claims := forge.Claims(fx.valid)
			kid := forge.KeyID(fx.valid)
			realNow := time.Now
			type row struct {
				name   string
				header []string
				now    func() time.Time
				want   string
			}
			rows := []row{
				{"forged signature", hdr(forge.FlipSignature(fx.valid)), nil, "token_invalid"},
				{"tampered claims", hdr(forge.WithClaims(fx.valid, merge(claims, map[string]any{"sub": "system:serviceaccount:kube-system:admin"}))), nil, "token_invalid"},
				{"another issuer's key", hdr(forge.Sign(claims, otherKey(fx.alg), fx.alg, kid)), nil, "token_invalid"},
				{"alg none", hdr(forge.AlgNone(claims, kid)), nil, "token_invalid"},
				{"HS256 signed with the public key", hdr(forge.HS256WithPublicKey(claims, fx.pub, kid)), nil, "token_invalid"},
				{"expired: one second past exp", hdr(fx.valid), func() time.Time { return fx.want.Expiry.Add(time.Second) }, "token_invalid"},
				{"at exp", hdr(fx.valid), func() time.Time { return fx.want.Expiry }, "token_invalid"},
				{"not yet valid", hdr(fx.valid), func() time.Time { return fx.want.IssuedAt.Add(-2 * time.Minute) }, "token_invalid"},
				{"wrong audience", hdr(fx.mint(t, []string{"other-service"})), nil, "token_invalid"},
				{"no audience requested", hdr(fx.mint(t, nil)), nil, "token_invalid"},
				{"truncated", hdr(fx.valid[:len(fx.valid)-12]), nil, "token_invalid"},
				{"garbage", hdr("not-a-jwt-at-all"), nil, "token_invalid"},
				{"oversize", hdr(strings.Repeat("a", token.MaxLength+1)), nil, "malformed_credentials"},
				{"duplicated Authorization", []string{"Bearer " + fx.valid, "Bearer " + fx.valid}, nil, "malformed_credentials"},
				{"Basic scheme", []string{"Basic dXNlcjpwYXNz"}, nil, "malformed_credentials"},
				{"token without scheme", []string{fx.valid}, nil, "malformed_credentials"},
				{"no Authorization", nil, nil, "token_missing"},
			}
			if b.tokenReview {
				doomed := fx.deletePod(t, func(tok string) {
					if _, reason := verdict(context.Background(), b.newAuth(t, realNow), hdr(tok)); reason != "" {
						t.Fatalf("the token was refused (%s) before its pod was deleted", reason)
					}
				})
				rows = append(rows, row{"token for a deleted pod", hdr(doomed), nil, "token_invalid"})
			}
			for _, r := range rows {
				t.Run(r.name, func(t *testing.T) {
					now := r.now
					if now == nil {
						now = realNow
					}
					a := b.newAuth(t, now)
					var c *authn.Caller
					var got string
					// The API server keeps accepting a deleted pod's token
					// for about 10 s (its own cache): wait that out.
					for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(time.Second) {
						c, got = verdict(context.Background(), a, r.header)
						if got == r.want || r.name != "token for a deleted pod" || time.Now().After(deadline) {
							break
						}
					}
					if got != r.want {
						t.Fatalf("reason %q (caller %+v); want %q", got, c, r.want)
					}
					if c != nil {
						t.Fatal("a refused row returned a caller")
					}
				})
			}
			t.Run("oversize reaching the authenticator directly", func(t *testing.T) {
				_, err := b.newAuth(t, realNow).Authenticate(context.Background(), strings.Repeat("a", token.MaxLength+1))
				if authn.ReasonOf(err) != authn.TokenInvalid {
					t.Fatalf("err = %v", err)
				}
			})
			t.Run("valid", func(t *testing.T) {
				c, reason := verdict(context.Background(), b.newAuth(t, realNow), hdr(fx.valid))
				if reason != "" {
					t.Fatalf("refused: %s", reason)
				}
				if got, want := fmt.Sprintf("%+v", *c), fmt.Sprintf("%+v", fx.want); got != want {
					t.Fatalf("caller\n got %s\nwant %s", got, want)
				}
			})
		})
	}
}

// TestBackendsAgree: TokenReview and JWKS give the same Caller for the same
// token.
func TestBackendsAgree(t *testing.T) {
	bs := backends(t)
	for i := 0; i < len(bs); i += 2 {
		a, b := bs[i], bs[i+1]
		ca, err := a.newAuth(t, time.Now).Authenticate(context.Background(), a.fx.valid)
		if err != nil {
			t.Fatal(err)
		}
		cb, err := b.newAuth(t, time.Now).Authenticate(context.Background(), b.fx.valid)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", *ca) != fmt.Sprintf("%+v", *cb) {
			t.Errorf("%s and %s disagree:\n%+v\n%+v", a.name, b.name, *ca, *cb)
		}
	}
}

func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
