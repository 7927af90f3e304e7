//go:build callerauth_noauthconfig

package callers

import (
	"errors"

	"github.com/callerauth/callerauth/authn/oidc"
)

// AuthConfigBuilt reports whether this build has the oidc backend's
// AuthenticationConfiguration reader: not in this one (the tag
// callerauth_noauthconfig).
const AuthConfigBuilt = false

// readAuthenticationConfig is not reached: Options.Complete refuses
// --caller-backend oidc in this build.
func readAuthenticationConfig(oidc.ReloadingConfig) (*oidc.Reloading, error) {
	return nil, errors.New(noAuthConfig)
}
