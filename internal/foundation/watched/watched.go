// Package watched keeps a value loaded from files and follows the files:
// the one way the services reload what they read from disk — the serving
// certificate, the AuthenticationConfiguration, the pdp's policy and
// signing keys.
//
// The rules, the same for all: the first load must succeed (a service does
// not start without its value); after it, a look notices a change by the
// files' stamps (size, modification time, inode; a directory by its
// entries) and loads again; a load that fails keeps the last good value in
// force and is said once — logged at the first failure of a given state of
// the files, not at every look — and counted every time; a new value is
// told to the listeners. A failed state is looked at again only when the
// files change, unless Retry is set (a configuration whose issuer was not
// reachable yet: the same files may load a minute later).
package watched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config says what to load and how to follow it.
type Config[T any] struct {
	// What names the value in logs ("the serving certificate").
	What string
	// Paths are the files and directories the value is loaded from; their
	// stamps say whether they changed (a directory: its entries' names,
	// sizes and times, as a mounted ConfigMap's swap of ..data changes
	// them).
	Paths []string
	// Load reads the files into a value.
	Load func() (T, error)
	// Same, when set, says that a value loaded again is the one in force
	// (the same bytes under a new stamp): no change is told or counted.
	Same func(old, new T) bool
	// Interval between two looks, by Start or MaybeLook. Default 10 s.
	Interval time.Duration
	// Retry looks at a failed state of the files again at every look,
	// rather than only once they change.
	Retry bool
	// Logger says changes and failures. Default slog.Default().
	Logger *slog.Logger
	// Changed are told each new value, the one it replaced first.
	Changed []func(old, new T)
	// Result is told the outcome of every load after the first (nil: a
	// new value or the same one), for a reloads counter.
	Result func(err error)
	// Describe adds attributes to the log line of a new value.
	Describe func(v T) []any
}

// Value is the last good value, followed.
type Value[T any] struct {
	cfg     Config[T]
	current atomic.Pointer[T]

	mu        sync.Mutex // one look or load at a time
	stamp     string     // of the files the value in force was loaded from
	failed    string     // of the files whose load failed last, "" after a success
	failedErr string
	looked    time.Time
}

// New loads the value; an error is the service's to stop on.
func New[T any](cfg Config[T]) (*Value[T], error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Load == nil {
		return nil, errors.New("watched: no Load")
	}
	v := &Value[T]{cfg: cfg}
	v.stamp = Stamp(cfg.Paths...)
	first, err := cfg.Load()
	if err != nil {
		return nil, err
	}
	v.current.Store(&first)
	v.looked = time.Now()
	return v, nil
}

// Get is the value in force.
func (v *Value[T]) Get() T { return *v.current.Load() }

// Look loads the value again when its files changed since it was loaded
// (or, with Retry, when the last load failed), and says whether a new
// value took over.
func (v *Value[T]) Look() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.looked = time.Now()
	stamp := Stamp(v.cfg.Paths...)
	switch {
	case stamp == v.stamp && v.failed == "":
		return false
	case stamp == v.failed && !v.cfg.Retry:
		return false
	}
	return v.load(stamp) == nil
}

// MaybeLook looks when Interval has passed since the last look: for a
// value read on a hot path (a TLS handshake) instead of by a runnable.
func (v *Value[T]) MaybeLook() {
	v.mu.Lock()
	due := time.Since(v.looked) >= v.cfg.Interval
	v.mu.Unlock()
	if due {
		v.Look()
	}
}

// Reload loads the value now, changed files or not (SIGHUP), and returns
// why it failed.
func (v *Value[T]) Reload() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.looked = time.Now()
	return v.load(Stamp(v.cfg.Paths...))
}

// load reads the files of stamp; the caller holds mu.
func (v *Value[T]) load(stamp string) error {
	next, err := v.cfg.Load()
	if v.cfg.Result != nil {
		v.cfg.Result(err)
	}
	if err != nil {
		if stamp != v.failed || err.Error() != v.failedErr {
			v.cfg.Logger.Error(fmt.Sprintf("%s: the files changed but do not load; the last good version stays in force", v.cfg.What),
				"paths", v.cfg.Paths, "error", err)
		}
		v.failed, v.failedErr = stamp, err.Error()
		return err
	}
	if v.failed != "" {
		v.cfg.Logger.Info(fmt.Sprintf("%s: the files load again", v.cfg.What), "paths", v.cfg.Paths)
	}
	v.failed, v.failedErr = "", ""
	v.stamp = stamp
	old := v.Get()
	if v.cfg.Same != nil && v.cfg.Same(old, next) {
		return nil
	}
	v.current.Store(&next)
	attrs := []any{"paths", v.cfg.Paths}
	if v.cfg.Describe != nil {
		attrs = append(attrs, v.cfg.Describe(next)...)
	}
	v.cfg.Logger.Info(fmt.Sprintf("%s: reloaded", v.cfg.What), attrs...)
	for _, f := range v.cfg.Changed {
		f(old, next)
	}
	return nil
}

// Start looks every Interval until ctx ends: a runnable.
func (v *Value[T]) Start(ctx context.Context) error {
	t := time.NewTicker(v.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			v.Look()
		}
	}
}

// Stamp summarises paths: each file's size, modification time and inode
// (a symbolic link followed), each directory's entries' names, sizes and
// times (the links themselves), "missing" for an absent path.
func Stamp(paths ...string) string {
	var b strings.Builder
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(&b, "%s:missing;", p)
			continue
		}
		if !fi.IsDir() {
			fmt.Fprintf(&b, "%s:%s;", p, stampOf(fi))
			continue
		}
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				fmt.Fprintf(&b, "%s:%s;", filepath.Join(p, e.Name()), stampOf(info))
			}
		}
	}
	return b.String()
}

func stampOf(fi os.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d:%d:%d", fi.Size(), fi.ModTime().UnixNano(), ino)
}
