//go:build linux

package token

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchesSharedAndReleased: two token files in one directory share the
// process's inotify instance and the directory's watch; dropping one
// source leaves the other watched, and dropping both leaves no watch.
func TestWatchesSharedAndReleased(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	paths := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	for _, p := range paths {
		if err := os.WriteFile(p, []byte("tok-"+filepath.Base(p)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	a, b := File(paths[0]), File(paths[1])
	if a.w == nil || a.w.h != b.w.h {
		t.Fatal("the two sources do not share one inotify instance")
	}
	for _, s := range []*FileSource{a, b, a, b} {
		if _, err := s.Token(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !Watched(a) || !Watched(b) {
		t.Fatal("not on the watches after settled reads")
	}
	a.w.close()
	if err := os.WriteFile(paths[1], []byte("tok-B"), 0o600); err != nil {
		t.Fatal(err)
	}
	if Watched(b) {
		t.Fatal("b's change went unnoticed after a dropped its watches")
	}
	if got, _ := b.Token(context.Background()); got != "tok-B" {
		t.Fatalf("b read %q", got)
	}
	b.w.close()
	h := b.w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for wd, ws := range h.subs {
		for w := range ws {
			if w == a.w || w == b.w {
				t.Errorf("watch %d still held by a dropped source", wd)
			}
		}
	}
}
