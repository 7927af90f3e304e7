// Package tokenvolume lays out a token volume the way the kubelet lays out
// Secret and projected volumes — token -> ..data/token, ..data -> a
// timestamped directory — and updates it the same way, by renaming a new
// ..data symlink over the old one. Tests and the demo use it to rotate a
// token under a running client exactly as a cluster would.
package tokenvolume

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Volume is a kubelet-style token volume. It is safe for concurrent use.
type Volume struct {
	dir string
	mu  sync.Mutex
	gen int
}

// New creates the volume in dir (created if missing) with the token link in
// place; the link dangles until the first Publish.
func New(dir string) (*Volume, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tokenvolume: %w", err)
	}
	if err := os.Symlink(filepath.Join("..data", "token"), filepath.Join(dir, "token")); err != nil {
		return nil, fmt.Errorf("tokenvolume: %w", err)
	}
	return &Volume{dir: dir}, nil
}

// Path returns the path a client reads: <dir>/token.
func (v *Volume) Path() string { return filepath.Join(v.dir, "token") }

// Publish atomically replaces the token with tok.
func (v *Volume) Publish(tok string) error {
	return v.PublishFiles(map[string][]byte{"token": []byte(tok)})
}

// NewDir creates an empty volume in dir, for [Volume.PublishFiles]: a
// ConfigMap or Secret volume of several keys.
func NewDir(dir string) (*Volume, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tokenvolume: %w", err)
	}
	return &Volume{dir: dir}, nil
}

// PublishFiles atomically replaces the volume's files (name → content) as
// the kubelet updates a ConfigMap or Secret volume: the files in a new
// timestamped directory, each name a link through ..data, ..data swapped
// by one rename, the previous directory removed.
func (v *Volume) PublishFiles(files map[string][]byte) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gen++
	ts := fmt.Sprintf("..2026_11_30_00_00_%04d", v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o700); err != nil {
		return fmt.Errorf("tokenvolume: %w", err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), b, 0o600); err != nil {
			return fmt.Errorf("tokenvolume: %w", err)
		}
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return fmt.Errorf("tokenvolume: %w", err)
			}
		}
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		return fmt.Errorf("tokenvolume: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		return fmt.Errorf("tokenvolume: %w", err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			return fmt.Errorf("tokenvolume: %w", err)
		}
	}
	return nil
}
