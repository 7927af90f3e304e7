package kube_test

import (
	"context"
	"fmt"
	"os"

	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/devissuer"
)

// Verifying a service-account token with TokenReview: the reviewer needs
// the audience the token must be minted for, and refuses to be built
// without one. The dev issuer serves the TokenReview API on loopback here;
// in a cluster, leave Kubeconfig empty (in-cluster) and grant create on
// tokenreviews.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "devissuer")
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
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "team-a", ServiceAccount: "builder", Audiences: []string{"my-service"}})
	if err != nil {
		panic(err)
	}
	reviewer, err := kube.New(kube.Config{Kubeconfig: iss.KubeconfigFile(), Audiences: []string{"my-service"}})
	if err != nil {
		panic(err)
	}
	caller, err := reviewer.Authenticate(context.Background(), tok.Token)
	fmt.Println(caller.Username, caller.Groups, err)
	_, err = kube.New(kube.Config{Kubeconfig: iss.KubeconfigFile()})
	fmt.Println(err)
	// Output:
	// system:serviceaccount:team-a:builder [system:serviceaccounts system:serviceaccounts:team-a system:authenticated] <nil>
	// kube: at least one audience is required: a token minted for another service must not be accepted
}
