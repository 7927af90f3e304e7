//go:build callerauth_tokenreview

package callers

import (
	"errors"

	"github.com/callerauth/callerauth/authn/oidc"
)

func readAuthenticationConfig(oidc.ReloadingConfig) (*oidc.Reloading, error) { return nil, errors.New("not in this build") }
