// Package fsutil writes an embedded file tree to disk, for the examples
// that `callerauth demo` and the tests run from their embedded copies,
// and reads the file a flag names, bounded.
package fsutil

import (
	"crypto/x509"
	"fmt"
	"io"
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

// ReadFlagFile reads the file a flag names, at most limit bytes; its
// errors name the flag and the file.
func ReadFlagFile(flag, name string, limit int) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", flag, name, err)
	case len(b) > limit:
		return nil, fmt.Errorf("%s %s: larger than %d bytes", flag, name, limit)
	}
	return b, nil
}

// MaxCAFileBytes bounds a CA bundle a flag names.
const MaxCAFileBytes = 1 << 20

// ReadCAs reads the CA bundle a flag names into a pool; a file with no
// PEM certificate is an error naming the flag.
func ReadCAs(flag, name string) (*x509.CertPool, error) {
	pem, err := ReadFlagFile(flag, name, MaxCAFileBytes)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", flag, name)
	}
	return pool, nil
}
