// Package secretsengine carries the secrets-engine example — the policy
// package, the registry snapshot and the two check requests of this folder
// — so that `callerauth demo` and the tests use these very files, with no
// checkout and no copy to drift from them.
package secretsengine

import (
	"embed"

	"github.com/callerauth/callerauth/internal/foundation/fsutil"
)

// Files are the example's files: policy/ (manifest.json, catalog.cedar,
// schema.cedarschema), registry.json, check_request_allow_rotate.json and
// check_request_deny_private_key.json.
//
//go:embed policy registry.json check_request_allow_rotate.json check_request_deny_private_key.json
var Files embed.FS

// AllowRequest is check_request_allow_rotate.json: 200 allow
// catalog_lane_policy_matched under the example package.
func AllowRequest() []byte { return mustRead("check_request_allow_rotate.json") }

// DenyRequest is check_request_deny_private_key.json: 200 deny
// private_key_fields_forbidden.
func DenyRequest() []byte { return mustRead("check_request_deny_private_key.json") }

func mustRead(name string) []byte {
	b, err := Files.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return b
}

// WriteTo writes the policy package and the registry under dir and returns
// the paths to give the pdp as --policy-dir and --registry.
func WriteTo(dir string) (policyDir, registry string, err error) {
	return fsutil.WritePackage(Files, dir)
}
