// Package authn_test runs the verification attack matrix against every
// backend: the dev issuer through TokenReview and through its JWKS, and a
// real kube-apiserver through TokenReview and through its own OIDC
// discovery and JWKS.
package authn_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/callerauth/callerauth/test/kubeapi"
)

var apiserver *kubeapi.Server

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	s, err := kubeapi.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/authn: cannot start the kube-apiserver these tests need:", err)
		os.Exit(1)
	}
	apiserver = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}
