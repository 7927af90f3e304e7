// Package fsutil writes an embedded file tree to disk, for the examples
// that `callerauth demo` and the tests run from their embedded copies.
package fsutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteTree writes every file of fsys under dir (directories 0700, files
// 0600).
func WriteTree(fsys fs.FS, dir string) error {
	return fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o600)
	})
}

// WritePackage writes a policy package example — policy/ and
// registry.json — under dir and returns the paths to give the pdp as
// --policy-dir and --registry.
func WritePackage(fsys fs.FS, dir string) (policyDir, registry string, err error) {
	if err := WriteTree(fsys, dir); err != nil {
		return "", "", fmt.Errorf("fsutil: writing the example under %s: %w", dir, err)
	}
	return filepath.Join(dir, "policy"), filepath.Join(dir, "registry.json"), nil
}
