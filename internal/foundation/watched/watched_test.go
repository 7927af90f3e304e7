package watched_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/watched"
)

// write replaces path with a new file (a new inode, as a rename or a
// ConfigMap swap gives).
func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestFollows: a change is loaded and told; a failing file keeps the last
// good value, is said once however often it is looked at, counted every
// time, and looked at again only when the file changes; a repaired file
// takes over; the same content under a new stamp is no change.
func TestFollows(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "v")
	write(t, p, "one")
	var logs bytes.Buffer
	var told []string
	var results []error
	v, err := watched.New(watched.Config[string]{
		What:  "the test value",
		Paths: []string{p},
		Load: func() (string, error) {
			b, err := os.ReadFile(p)
			if strings.HasPrefix(string(b), "bad") {
				return "", errors.New("bad content")
			}
			return string(b), err
		},
		Same:    func(a, b string) bool { return a == b },
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Changed: []func(old, new string){func(old, new string) { told = append(told, old+">"+new) }},
		Result:  func(err error) { results = append(results, err) },
	})
	if err != nil || v.Get() != "one" {
		t.Fatalf("%v %q", err, v.Get())
	}
	if v.Look() || len(results) != 0 {
		t.Fatal("an unchanged file was loaded again")
	}
	write(t, p, "two")
	if !v.Look() || v.Get() != "two" || len(told) != 1 || told[0] != "one>two" {
		t.Fatalf("after a change: %q, told %v", v.Get(), told)
	}
	write(t, p, "bad one")
	for range 3 {
		v.Look()
	}
	if v.Get() != "two" {
		t.Fatalf("a failing file replaced the value: %q", v.Get())
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 || len(results) != 2 {
		t.Fatalf("a failure said %d times, loaded %d times:\n%s", n, len(results), logs.String())
	}
	write(t, p, "bad two")
	v.Look()
	if n := strings.Count(logs.String(), "do not load"); n != 2 {
		t.Fatalf("a new failing state said %d times", n)
	}
	write(t, p, "two") // the same content as in force
	if v.Look(); v.Get() != "two" || len(told) != 1 {
		t.Fatalf("the same content was told as a change: %v", told)
	}
	write(t, p, "three")
	if !v.Look() || v.Get() != "three" || len(told) != 2 {
		t.Fatalf("after the repair: %q %v", v.Get(), told)
	}
	if err := v.Reload(); err != nil {
		t.Fatal(err)
	}
}

// TestRetryAndFirstLoad: with Retry a failed state is loaded again at every
// look (something beyond the file may have changed); a first load that
// fails is an error; MaybeLook looks only once Interval has passed.
func TestRetryAndFirstLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "v")
	write(t, p, "a")
	ready := false
	loads := 0
	v, err := watched.New(watched.Config[string]{
		What: "x", Paths: []string{p}, Retry: true, Interval: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
		Load: func() (string, error) {
			loads++
			b, _ := os.ReadFile(p)
			if string(b) == "b" && !ready {
				return "", errors.New("not ready")
			}
			return string(b), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	write(t, p, "b")
	v.Look()
	v.Look()
	if v.Get() != "a" || loads != 3 {
		t.Fatalf("%q after %d loads", v.Get(), loads)
	}
	ready = true
	if !v.Look() || v.Get() != "b" {
		t.Fatalf("%q once ready", v.Get())
	}
	before := loads
	write(t, p, "c")
	v.MaybeLook() // the interval (an hour) has not passed
	if loads != before || v.Get() != "b" {
		t.Fatal("MaybeLook looked before the interval")
	}
	if _, err := watched.New(watched.Config[string]{What: "x", Load: func() (string, error) { return "", errors.New("no") }}); err == nil {
		t.Fatal("a failing first load was accepted")
	}
}

// TestStampOfADirectory: a directory's stamp changes when an entry is
// added, removed or replaced, as a ConfigMap's swap of ..data does.
func TestStampOfADirectory(t *testing.T) {
	dir := t.TempDir()
	s0 := watched.Stamp(dir)
	write(t, filepath.Join(dir, "a"), "1")
	s1 := watched.Stamp(dir)
	write(t, filepath.Join(dir, "a"), "2")
	s2 := watched.Stamp(dir)
	if s0 == s1 || s1 == s2 || watched.Stamp(filepath.Join(dir, "none")) == s0 {
		t.Fatalf("stamps %q %q %q", s0, s1, s2)
	}
}
