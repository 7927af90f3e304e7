package authconfig_test

import (
	"fmt"

	"github.com/callerauth/callerauth/authn/authconfig"
)

// Reading the file a platform team gives its API server: the issuers come
// out ready for oidc.New, each with its claim mappings compiled; what the
// API server would accept but callerauth cannot honour is refused,
// naming the field.
func ExampleParse() {
	doc := []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://idp.tenant-a.example
    audiences: [my-service]
  claimMappings:
    username: {claim: sub, prefix: "tenant-a:"}
    extra:
    - key: callerauth.dev/tenant
      valueExpression: '"tenant-a"'
`)
	cfg, err := authconfig.Parse(doc)
	if err != nil {
		fmt.Println(err)
		return
	}
	ic := cfg.Issuers[0]
	tenant, _ := authconfig.ConstantExtra(ic, authconfig.ExtraTenant)
	fmt.Println(ic.Issuer, ic.Audiences, "tenant", tenant)

	_, err = authconfig.Parse(append(doc, "anonymous: {enabled: true}\n"...))
	fmt.Println(err)
	// Output:
	// https://idp.tenant-a.example [my-service] tenant tenant-a
	// anonymous: Forbidden: callerauth authenticates bearer tokens only; it has no anonymous access to configure
}
