package authn_test

import (
	"context"
	"fmt"
	"time"

	"github.com/callerauth/callerauth/authn"
)

// An Authenticator of your own behind the verdict cache: a success is
// reused for the cache's TTL (never past the token's expiry), and every
// failure carries one of four reasons a service can act on.
func ExampleNewCache() {
	calls := 0
	verify := authn.AuthenticatorFunc(func(_ context.Context, token string) (*authn.Caller, error) {
		calls++
		if token != "good" {
			return nil, authn.Fail(authn.TokenInvalid, "not a token this verifier knows")
		}
		return &authn.Caller{Username: "system:serviceaccount:team-a:builder", Expiry: time.Now().Add(time.Hour)}, nil
	})
	cache := authn.NewCache(authn.Layer{Authenticator: verify}, authn.CacheConfig{})
	for range 3 {
		c, _ := cache.Authenticate(context.Background(), "good")
		fmt.Println(c.Username)
	}
	_, err := cache.Authenticate(context.Background(), "forged")
	fmt.Println(authn.ReasonOf(err), authn.ReasonOf(err).Code())
	fmt.Println("verifications:", calls)
	// Output:
	// system:serviceaccount:team-a:builder
	// system:serviceaccount:team-a:builder
	// system:serviceaccount:team-a:builder
	// token_invalid Unauthenticated
	// verifications: 2
}
