package oidc_test

import (
	"context"
	"fmt"
	"os"

	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/devissuer"
)

// Verifying offline against an issuer's published keys — no call to the
// issuer per token, one discovery and JWKS fetch kept fresh — with the
// audiences each issuer's tokens must carry. The dev issuer publishes its
// keys on loopback here; in production each tenant's identity provider.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "oidc")
	defer os.RemoveAll(dir)
	iss, err := devissuer.Open(dir, devissuer.Config{})
	if err != nil {
		panic(err)
	}
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	verifier, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: []string{"my-service"}}}})
	if err != nil {
		panic(err)
	}
	for _, aud := range []string{"my-service", "another-service"} {
		tok, _ := iss.Mint(devissuer.TokenRequest{Namespace: "team-a", ServiceAccount: "builder", Audiences: []string{aud}})
		caller, err := verifier.Authenticate(context.Background(), tok.Token)
		if err != nil {
			fmt.Println(aud, "refused:", err)
			continue
		}
		fmt.Println(aud, "accepted:", caller.Username)
	}
	// Output:
	// my-service accepted: system:serviceaccount:team-a:builder
	// another-service refused: authn: token_invalid: token audiences ["another-service"] include none of ["my-service"]
}
