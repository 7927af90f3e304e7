// Package search carries the AuthZEN Search interop scenario — the policy
// package and the registry of this folder — so that the tests and
// `make bench-compare` use these very files.
package search

import (
	"embed"
	"fmt"
	"path/filepath"

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
	if err := fsutil.WriteTree(Files, dir); err != nil {
		return "", "", fmt.Errorf("search: %w", err)
	}
	return filepath.Join(dir, "policy"), filepath.Join(dir, "registry.json"), nil
}
