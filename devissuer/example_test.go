package devissuer_test

import (
	"fmt"
	"os"
	"time"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/token"
)

// Minting a Kubernetes-shaped service-account token, bound to a pod, as a
// kubelet's projected volume would hold it: the claims are the API
// server's, and the client reads them as it would a real one.
func ExampleIssuer_Mint() {
	dir, _ := os.MkdirTemp("", "devissuer")
	defer os.RemoveAll(dir)
	iss, err := devissuer.Open(dir, devissuer.Config{})
	if err != nil {
		panic(err)
	}
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "team-a", ServiceAccount: "builder", Audiences: []string{"my-service"},
		Pod: "builder-7d9f", Node: "node-a", Lifetime: 10 * time.Minute})
	if err != nil {
		panic(err)
	}
	fmt.Println(tok.Claims.Subject, tok.Claims.Kubernetes.Pod.Name, tok.Claims.Kubernetes.Node.Name)
	c, err := token.ReadClaims(tok.Token)
	fmt.Println(c.Audience, c.Expiry.Sub(c.IssuedAt.Time), err)
	// Output:
	// system:serviceaccount:team-a:builder builder-7d9f node-a
	// [my-service] 10m0s <nil>
}
