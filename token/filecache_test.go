package token_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/token"
)

// settle backdates a file's times, as a file nobody has touched for an
// hour: the source then remembers what it read from it.
func settle(t *testing.T, path string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, s token.Source) string {
	t.Helper()
	tok, err := s.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestFileSeesEveryChangeOnTheNextCall: whether or not the previous read
// is remembered, the next call returns what the file holds now — an
// in-place rewrite of the same size, fresh or onto a settled file, a
// kubelet-style ..data swap to a file as old and as long, a removal.
func TestFileSeesEveryChangeOnTheNextCall(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := token.File(p)

	write("token-aaaa\n")
	if got := read(t, src); got != "token-aaaa" {
		t.Fatalf("first read %q", got)
	}
	write("token-bbbb\n") // same size, at once
	if got := read(t, src); got != "token-bbbb" {
		t.Fatalf("a fresh in-place rewrite of the same size: %q", got)
	}
	settle(t, p)
	if got := read(t, src); got != "token-bbbb" {
		t.Fatalf("settled: %q", got)
	}
	if got := read(t, src); got != "token-bbbb" { // from memory now
		t.Fatalf("remembered: %q", got)
	}
	write("token-cccc\n") // in place, same size, onto the remembered file
	if got := read(t, src); got != "token-cccc" {
		t.Fatalf("an in-place rewrite of a remembered file: %q", got)
	}

	// A kubelet-style projected volume: token -> ..data/token, ..data ->
	// a timestamped directory swapped atomically. Both files are as old
	// and as long as each other: only their identity differs.
	vol := filepath.Join(dir, "vol")
	mk := func(name, tok string) {
		t.Helper()
		d := filepath.Join(vol, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "token"), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		settle(t, filepath.Join(d, "token"))
	}
	mk("..2026_11_30_1", "volume-1111")
	mk("..2026_11_30_2", "volume-2222")
	if err := os.Symlink("..2026_11_30_1", filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "token"), filepath.Join(vol, "token")); err != nil {
		t.Fatal(err)
	}
	vsrc := token.File(filepath.Join(vol, "token"))
	for range 2 {
		if got := read(t, vsrc); got != "volume-1111" {
			t.Fatalf("volume: %q", got)
		}
	}
	if err := os.Symlink("..2026_11_30_2", filepath.Join(vol, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(vol, "..data_tmp"), filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	if got := read(t, vsrc); got != "volume-2222" {
		t.Fatalf("after the ..data swap to a file as old and as long: %q", got)
	}

	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Token(context.Background()); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("a removed file: %v", err)
	}
}
