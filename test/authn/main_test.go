// Package authn_test runs the verification attack matrix against every
// backend: the dev issuer through TokenReview and through its JWKS, and a
// real kube-apiserver through TokenReview and through its own OIDC
// discovery and JWKS.
package authn_test

import (
	"testing"

	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

var apiserver *kubeapi.Server

func TestMain(m *testing.M) {
	e2e.Main(m, nil, nil, kubeapi.ForTests(&apiserver))
}
