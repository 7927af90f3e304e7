package token_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/callerauth/callerauth/token"
)

// TestFileWatchesEveryStepOfThePath: on Linux a call returns the
// remembered read without a stat only while nothing on the way to the file
// changed. Each change below keeps the file as long and as old as before,
// so only the watches (or the inode) can tell; each must be seen on the
// very next call, and the source must be back on the watches after it.
func TestFileWatchesEveryStepOfThePath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux's; elsewhere every call stats (TestFileSeesEveryChangeOnTheNextCall)")
	}
	base := t.TempDir()
	mkfile := func(p, tok string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		settle(t, p)
	}
	// base/ctx -> gen1 (a directory link), base/ctx/deep/token; the file
	// also has a hard link in base/other.
	mkfile(filepath.Join(base, "gen1", "deep", "token"), "gen1-token")
	mkfile(filepath.Join(base, "gen2", "deep", "token"), "gen2-token")
	if err := os.Symlink("gen1", filepath.Join(base, "ctx")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(base, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(base, "gen1", "deep", "token"), filepath.Join(base, "other", "hard")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(base, "ctx", "deep", "token")
	src := token.File(p)
	steady := func(want string) {
		t.Helper()
		for range 2 {
			if got := read(t, src); got != want {
				t.Fatalf("read %q, want %q", got, want)
			}
		}
		if !token.Watched(src) {
			t.Fatalf("after two reads of a settled file: not on the watches")
		}
	}
	changed := func(what, want string) {
		t.Helper()
		if token.Watched(src) {
			t.Fatalf("%s: the watches did not notice", what)
		}
		if got := read(t, src); got != want {
			t.Fatalf("%s: read %q, want %q", what, got, want)
		}
		steady(want)
	}
	steady("gen1-token")

	// Churn beside the path is not a change of it.
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(base, "gen1", "deep", "neighbour"), []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "unrelated"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !token.Watched(src) {
		t.Fatal("writes to other files beside the path took the source off its watches")
	}

	// A write through a hard link in another directory: the file's own
	// watch.
	if err := os.WriteFile(filepath.Join(base, "other", "hard"), []byte("gen1-TOKEN"), 0o600); err != nil {
		t.Fatal(err)
	}
	settle(t, p)
	changed("a write through a hard link elsewhere", "gen1-TOKEN")

	// The directory link retargeted (a new link renamed over it): a name
	// looked up in base.
	if err := os.Symlink("gen2", filepath.Join(base, "ctx.tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(base, "ctx.tmp"), filepath.Join(base, "ctx")); err != nil {
		t.Fatal(err)
	}
	changed("the directory link retargeted", "gen2-token")

	// A directory on the way renamed away and another put in its place.
	mkfile(filepath.Join(base, "deep3", "token"), "gen3-token")
	if err := os.Rename(filepath.Join(base, "gen2", "deep"), filepath.Join(base, "gen2", "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(base, "deep3"), filepath.Join(base, "gen2", "deep")); err != nil {
		t.Fatal(err)
	}
	changed("a directory on the way replaced", "gen3-token")

	// An attribute change is looked at (a stat shows the same file: no
	// read), and the source is back on its watches.
	if err := os.Chmod(p, 0o400); err != nil {
		t.Fatal(err)
	}
	changed("a chmod", "gen3-token")
}
