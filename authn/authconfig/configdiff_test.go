package authconfig

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
)

// apiServerValidates is the API server's own decoding and validation of
// an AuthenticationConfiguration, with its service-account issuers
// disallowed as its --authentication-config loader disallows them.
func apiServerValidates(t *testing.T, doc string, serviceAccountIssuers ...string) error {
	t.Helper()
	obj, err := runtime.Decode(configCodecs.UniversalDecoder(), []byte(doc))
	if err != nil {
		return err
	}
	return apiservervalidation.ValidateAuthenticationConfiguration(authenticationcel.NewDefaultCompiler(), obj.(*apiserver.AuthenticationConfiguration), serviceAccountIssuers).ToAggregate()
}

// TestConfigurationDifferences: the two files the API server and callerauth
// judge differently, each as docs/authn.md's differences table says.
func TestConfigurationDifferences(t *testing.T) {
	// No issuer: the API server has other authenticators and takes it;
	// a service with no issuer could serve no caller, and stops at start-up.
	empty := "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt: []\n"
	if err := apiServerValidates(t, empty); err != nil {
		t.Fatalf("the API server's validation refuses jwt: []: %v", err)
	}
	if _, err := Parse([]byte(empty)); err == nil || !strings.Contains(err.Error(), "callerauth needs at least one issuer") {
		t.Fatalf("callerauth on jwt: []: %v", err)
	}
	// An issuer equal to the API server's own service-account issuer: the
	// API server, which knows its issuer, refuses the file; callerauth,
	// which does not, reads it.
	const sa = "https://kubernetes.default.svc.cluster.local"
	own := "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {url: " + sa + ", audiences: [a]}\n  claimMappings: {username: {claim: sub, prefix: \"\"}}\n"
	if err := apiServerValidates(t, own, sa); err == nil || !strings.Contains(err.Error(), "must not overlap with disallowed issuers") {
		t.Fatalf("the API server's validation on its own issuer: %v", err)
	}
	if _, err := Parse([]byte(own)); err != nil {
		t.Fatalf("callerauth on the API server's issuer: %v", err)
	}
}
