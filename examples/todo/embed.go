// Package todo carries the AuthZEN interop Todo example — the policy
// package and the registry of this folder — so that `callerauth demo` and
// the tests use these very files.
package todo

import (
	"embed"

	"github.com/callerauth/callerauth/internal/foundation/fsutil"
)

// Files are policy/ (manifest.json, schema.cedarschema, todo.cedar) and
// registry.json.
//
//go:embed policy registry.json
var Files embed.FS

// The scenario's users, by the identity the Todo application sends as
// subject.id.
const (
	Rick  = "CiRmZDA2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs" // admin, evil_genius
	Morty = "CiRmZDE2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs" // editor
	Beth  = "CiRmZDM2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs" // viewer
)

// WriteTo writes the policy package and the registry under dir and returns
// the paths to give the pdp as --policy-dir and --registry.
func WriteTo(dir string) (policyDir, registry string, err error) {
	return fsutil.WritePackage(Files, dir)
}
