//go:build !callerauth_noauthconfig

package callers

// The oidc backend reads a Kubernetes AuthenticationConfiguration, which
// links k8s.io/apiserver's types and validation and cel-go: about 1.5 MB
// the binary allocates at start-up and keeps, and 17 MB of executable.
// A build with the tag callerauth_noauthconfig leaves them out
// (authconfig_none.go): TokenReview only, docs/proxy.md.

import (
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
)

// AuthConfigBuilt reports whether this build has the oidc backend's
// AuthenticationConfiguration reader: false in a build with the tag
// callerauth_noauthconfig, where --caller-backend oidc stops the process
// at start-up.
const AuthConfigBuilt = true

func readAuthenticationConfig(c oidc.ReloadingConfig) (*oidc.Reloading, error) {
	return authconfig.NewReloading(c)
}
