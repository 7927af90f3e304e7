// Package search carries the AuthZEN Search interop scenario — the policy
// package and the registry of this folder — so that
// `make bench-compare` uses these very files.
package search

import (
	"embed"

	"github.com/callerauth/callerauth/internal/foundation/fsutil"
)

// Files are policy/ (manifest.json, schema.cedarschema, search.cedar) and
// registry.json.
//
//go:embed policy registry.json
var Files embed.FS

// WriteTo writes the policy package and the registry under dir and returns
// the paths to give the pdp as --policy-dir and --registry.
func WriteTo(dir string) (policyDir, registry string, err error) {
	return fsutil.WritePackage(Files, dir)
}
