package token

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// Source supplies the bearer token for one outgoing call.
//
//	src := token.CheckExpiry(token.File("/var/run/secrets/tokens/my-service"))
//	tok, err := src.Token(ctx) // read now; an expired JWT is an *ExpiredError naming the file
//
// Token is called once per call (per RPC, per HTTP request), so it must be
// cheap and safe for concurrent use by many goroutines. It returns a token
// without the "Bearer " prefix, or an error that says why there is none.
type Source interface {
	Token(ctx context.Context) (string, error)
}

// SourceFunc adapts a function to the [Source] interface.
type SourceFunc func(ctx context.Context) (string, error)

// Token calls f(ctx).
func (f SourceFunc) Token(ctx context.Context) (string, error) { return f(ctx) }

// ErrEmpty is returned (wrapped) when a source holds no token.
var ErrEmpty = errors.New("token: empty")

var (
	_ Source = (*FileSource)(nil)
	_ Source = StaticSource("")
	_ Source = SourceFunc(nil)
)

// FileSource reads the token from a file on every call. Create one with [File].
type FileSource struct {
	path string
	last atomic.Pointer[fileRead]
	now  func() time.Time
	// w, when set, says whether anything on the way to the file changed
	// since a read (Linux: inotify); nil, the path is stat'ed every call.
	w *watcher
}

// fileRead is what a read saw: the file's identity and the token, the
// watcher's generation it was made at and until when it stands without a
// stat.
type fileRead struct {
	dev, ino, size uint64
	mtime          int64 // ns
	tok            string
	gen            uint64
	until          time.Time
}

// recheck is how long a remembered read stands on the watcher's word
// alone: after it, the next call stats the file again, whatever the
// watches said (a safety net; no event is known to be missed).
const recheck = time.Second

// settled is how long after its last modification a file's content is
// trusted to be what its size and time say. File times come from a coarse
// clock (a few milliseconds): two writes in one tick can leave the same
// mtime. A read is only remembered once the file has been left alone for
// longer than any tick, so any later write gives it a newer mtime.
const settled = 50 * time.Millisecond

// maxResolveRetries bounds the reads again after "no such file": a swap
// in progress is over long before.
const maxResolveRetries = 8

// File returns a source that reads the token from path on every call.
//
// Every call looks at the file: an atomic rename, a kubelet ..data symlink
// swap or an in-place rewrite is seen on the next call. To stay as cheap as
// a static token, a call first stats the path (following symlinks) and
// reuses the previous read when the file is the same one (device and
// inode), of the same size and modification time, and that modification is
// older than the clock's granularity; otherwise it reads the file again.
// Leading and trailing white space (a trailing newline written by echo or a
// text editor) is removed. A missing, unreadable or empty file is an error
// naming the path; the error never contains the file's contents. A read
// that finds no file is retried a few times at once, resolving the path
// again: a kubelet swap that removes the previous generation while a read
// resolves through it never fails a call.
//
// On Linux the stat itself is spared while nothing changes: the source
// keeps inotify watches on every directory the path resolves through and
// on the file, and a call that finds no event queued (one ioctl) returns
// the remembered token. Any event about a name on the way,
// a watch lost, a file system that may change without telling this kernel
// (anything but tmpfs, ramfs and local disks), or a second since the last
// stat, and the call stats and compares as above.
func File(path string) *FileSource {
	s := &FileSource{path: path, now: time.Now, w: newWatcher()}
	if s.w != nil {
		runtime.AddCleanup(s, func(w *watcher) { w.close() }, s.w)
	}
	return s
}

// Path returns the file the source reads.
func (s *FileSource) Path() string { return s.path }

// String describes the source for error messages: file "<path>".
func (s *FileSource) String() string { return fmt.Sprintf("file %q", s.path) }

// Token returns the token in the file as it is now.
func (s *FileSource) Token(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	var gen uint64
	if s.w != nil {
		// Nothing queued about the path since the remembered read, within
		// a second of its stat: the token is what the file holds.
		g, ok := s.w.current()
		if last := s.last.Load(); ok && last != nil && last.gen == g && now().Before(last.until) {
			return last.tok, nil
		}
		// Place the watches (again) before the stat and the read, so that
		// a change after them is an event.
		gen = s.w.arm(s.path)
	}
	st, statErr := os.Stat(s.path)
	var id fileRead
	if statErr == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			id = fileRead{dev: uint64(sys.Dev), ino: sys.Ino, size: uint64(st.Size()), mtime: st.ModTime().UnixNano(), gen: gen} //nolint:gosec,unconvert // device numbers and sizes are non-negative.
			if last := s.last.Load(); last != nil && last.dev == id.dev && last.ino == id.ino && last.size == id.size && last.mtime == id.mtime {
				if last.gen != gen || now().After(last.until.Add(-recheck/2)) {
					// Remember the same read under the new generation.
					again := *last
					again.gen, again.until = gen, now().Add(recheck)
					s.last.Store(&again)
				}
				return last.tok, nil
			}
		}
	}
	raw, err := os.ReadFile(s.path)
	// A kubelet swap removes the previous generation right after renaming
	// ..data over it: a read that resolved ..data to that generation finds
	// nothing. Resolve the path again (a few times; each is a fresh lookup
	// through the new ..data), so that a rotation never fails a call.
	for retry := 0; retry < maxResolveRetries && errors.Is(err, fs.ErrNotExist); retry++ {
		raw, err = os.ReadFile(s.path)
		if err == nil {
			id = fileRead{} // the stat described another generation: do not remember this read under it
		}
	}
	if err != nil {
		s.last.Store(nil)
		// *PathError already names the path.
		return "", fmt.Errorf("token: reading token file: %w", err)
	}
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		s.last.Store(nil)
		return "", fmt.Errorf("%w: token file %q holds no token", ErrEmpty, s.path)
	}
	tok := string(b)
	// Remember the read under the stat's identity only when the stat
	// describes a file of the size read, modified long enough ago that any
	// later write must change its time. (A write between the stat and the
	// read makes the next stat differ: it is read again.)
	if t := now(); id.ino != 0 && id.size == uint64(len(raw)) && t.Sub(time.Unix(0, id.mtime)) > settled {
		id.tok, id.until = tok, t.Add(recheck)
		s.last.Store(&id)
	} else {
		s.last.Store(nil)
	}
	return tok, nil
}

// StaticSource is a fixed token. Create one with [Static].
type StaticSource string

// Static returns a source that always returns tok. It is meant for tests and
// for inline configuration; a real deployment should prefer [File] so that
// the token can be renewed without a restart.
func Static(tok string) StaticSource { return StaticSource(tok) }

// String describes the source for error messages without revealing the token.
func (s StaticSource) String() string { return "inline token" }

// Token returns the fixed token, or an error if it is empty.
func (s StaticSource) Token(context.Context) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: inline token is empty", ErrEmpty)
	}
	return string(s), nil
}

// describe names a source for error messages. Sources that implement
// fmt.Stringer describe themselves; others are named by their type.
func describe(s Source) string {
	if d, ok := s.(fmt.Stringer); ok {
		return d.String()
	}
	return fmt.Sprintf("%T", s)
}
