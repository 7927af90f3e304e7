//go:build linux

package token

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestDrainIsBounded: a queue that keeps more events than one call may
// read leaves the call after maxDrainReads reads, with every watcher told
// to look again, and the rest for the next call.
func TestDrainIsBounded(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	old := time.Now().Add(-time.Hour)
	if err := os.WriteFile(p, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	s := File(p)
	for range 2 {
		if _, err := s.Token(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !Watched(s) {
		t.Fatal("not on the watches after settled reads")
	}
	// Each chmod of the file queues IN_ATTRIB events of 16 bytes (on the
	// file's watch and its directory's): more than maxDrainReads
	// buffers' worth, well under any kernel's queue limit.
	defer func(n int) { maxDrainReads = n }(maxDrainReads)
	maxDrainReads = 2
	h := s.w.h
	events := maxDrainReads*len(h.buf)/syscall.SizeofInotifyEvent + 100
	for i := range events {
		if err := os.Chmod(p, 0o600|os.FileMode(i%2)<<8); err != nil {
			t.Fatal(err)
		}
	}
	before := s.w.gen.Load()
	h.mu.Lock()
	h.drain()
	h.mu.Unlock()
	if s.w.gen.Load() == before {
		t.Fatal("the watcher was not told to look again")
	}
	if n, err := unix.IoctlGetInt(h.fd, unix.TIOCINQ); err != nil || n == 0 {
		t.Fatalf("queued after one bounded drain: %d, %v; want the rest left for the next call", n, err)
	}
	if got, err := s.Token(context.Background()); err != nil || got != "tok" {
		t.Fatalf("read %q, %v", got, err)
	}
}
