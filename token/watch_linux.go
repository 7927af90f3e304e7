//go:build linux

package token

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watcher tells a [FileSource], for one non-blocking read(2) of an
// inotify descriptor, whether anything on the way to its file changed
// since it last looked: the directories the path resolves through (each
// watched for the names looked up in it, and for its own move or
// removal), and the file itself (for any write, through whatever link).
//
// It is an optimisation of the stat every call would otherwise make, never
// a source of truth: the source still stats and compares before it
// re-reads, and it stops trusting the watches (and stats on every call)
// whenever they cannot say for sure — a file system that may change
// without telling this kernel, a queue overflow, a read that fails, a path
// that resolved differently after the watches were placed.
type watcher struct {
	fd int
	// gen is bumped by every event that concerns the path; armed is gen+1
	// while the watches cover the path as it resolved at that generation,
	// 0 when they do not (never placed, a resolution that moved, a file
	// system that may change silently, the descriptor broken).
	gen, armed atomic.Uint64
	// draining is non-zero while events are being read: a call that finds
	// the queue empty then cannot tell whether gen is final yet.
	draining atomic.Int32

	mu sync.Mutex // the fields below, and reading the queue
	// broken stops the watcher for good (a read error other than
	// "nothing queued"): the source stats on every call.
	broken bool
	// tried and triedAt are the generation and time of the last arm that
	// could not place the watches: it is tried again after an event or
	// after recheck, not on every call.
	tried   uint64
	triedAt time.Time
	failed  bool
	watched map[int32]watch
	buf     [4096]byte
}

// watch is what one watch descriptor covers: the names looked up in a
// directory, or every event (the file itself).
type watch struct {
	names map[string]bool
	all   bool
}

// Events of interest: a directory entry created, removed, renamed to or
// from, a file written or its metadata changed, and the watched inode
// itself moved, removed or unmounted.
const (
	entryEvents = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO |
		syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_ATTRIB
	selfEvents = syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_UNMOUNT
	// Always reported, whatever the mask: the queue overflowed, a watch
	// was removed (its inode deleted, its file system unmounted).
	lostEvents = syscall.IN_Q_OVERFLOW | syscall.IN_IGNORED
)

// maxSymlinks bounds the links one resolution follows (the kernel's
// limit is 40).
const maxSymlinks = 40

// localFilesystems are the file systems whose every change this kernel
// makes, and so reports to inotify: tmpfs (Secret and projected volumes),
// ramfs, and local disks. A network or FUSE file system can change
// without telling this kernel: a path through one is stat'ed every call.
var localFilesystems = map[int64]bool{
	0x01021994: true, // tmpfs
	0x858458f6: true, // ramfs
	0xef53:     true, // ext2/3/4
	0x58465342: true, // xfs
	0x9123683e: true, // btrfs
	0x794c7630: true, // overlayfs
	0x2fc12fc1: true, // zfs
}

func newWatcher() *watcher {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	return &watcher{fd: fd, watched: map[int32]watch{}}
}

func (w *watcher) close() { _ = syscall.Close(w.fd) }

// current returns the generation, and whether the watches still cover
// the path as it was when they were placed (nothing that concerns it has
// happened since). When the kernel has nothing queued (one ioctl) it reads
// no more; otherwise it reads the queue.
func (w *watcher) current() (gen uint64, ok bool) {
	// TIOCINQ is FIONREAD: how many bytes of events are queued.
	if n, err := unix.IoctlGetInt(w.fd, unix.TIOCINQ); err == nil && n == 0 && w.draining.Load() == 0 {
		// Nothing queued, and nobody reading what was: gen is final for
		// every event before this call.
		g := w.gen.Load()
		return g, w.armed.Load() == g+1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drain()
	g := w.gen.Load()
	return g, w.armed.Load() == g+1
}

// drain reads every queued event; each one that concerns the path bumps
// the generation. The caller holds mu.
func (w *watcher) drain() {
	w.draining.Add(1)
	defer w.draining.Add(-1)
	for !w.broken {
		n, err := syscall.Read(w.fd, w.buf[:])
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return
		case err != nil || n <= 0:
			w.broken = true
			w.armed.Store(0)
			return
		}
		if w.concerns(w.buf[:n]) {
			w.gen.Add(1)
		}
	}
}

// concerns reports whether any event in buf (struct inotify_event
// records: wd, mask, cookie, len, then len bytes of NUL-padded name)
// concerns the path.
func (w *watcher) concerns(buf []byte) bool {
	hit := false
	for len(buf) >= syscall.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(buf[0:])) //nolint:gosec // a watch descriptor, an int in the kernel's record.
		mask := binary.NativeEndian.Uint32(buf[4:])
		n := int(binary.NativeEndian.Uint32(buf[12:]))
		end := syscall.SizeofInotifyEvent + n
		if end > len(buf) {
			return true // a record cut short: the kernel never does this; trust nothing
		}
		name := strings.TrimRight(string(buf[syscall.SizeofInotifyEvent:end]), "\x00")
		buf = buf[end:]
		if mask&(lostEvents|selfEvents) != 0 {
			hit = true
			continue
		}
		if wt, ok := w.watched[wd]; ok && (wt.all || wt.names[name]) {
			hit = true
		}
	}
	return hit
}

// arm places the watches for the path as it resolves now and returns the
// generation a read made after it belongs to. When the path cannot be
// watched for sure, the watcher is left disarmed: every call stats.
func (w *watcher) arm(path string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drain()
	if w.broken || w.failed && w.tried == w.gen.Load() && time.Since(w.triedAt) < recheck {
		return w.gen.Load()
	}
	w.armed.Store(0)
	w.failed, w.tried, w.triedAt = true, w.gen.Load(), time.Now()
	// The path may change while the watches are placed: resolve it again
	// after, and trust the watches only when both resolutions agree.
	for range 3 {
		dirs, file, err := resolve(path)
		if err != nil || !local(dirs, file) {
			w.unwatch(nil)
			return w.gen.Load()
		}
		placed, err := w.place(dirs, file)
		if err != nil {
			w.unwatch(nil)
			return w.gen.Load()
		}
		w.unwatch(placed)
		again, file2, err := resolve(path)
		if err == nil && file2 == file && sameLookups(dirs, again) {
			w.drain()
			g := w.gen.Load()
			w.armed.Store(g + 1)
			w.failed = false
			return g
		}
	}
	return w.gen.Load()
}

// place adds a watch on every directory looked up in (for the names
// looked up) and on the file.
func (w *watcher) place(dirs map[string]map[string]bool, file string) (map[int32]watch, error) {
	placed := map[int32]watch{}
	for dir, names := range dirs {
		wd, err := syscall.InotifyAddWatch(w.fd, dir, entryEvents|selfEvents|syscall.IN_ONLYDIR|syscall.IN_DONT_FOLLOW)
		if err != nil {
			return nil, fmt.Errorf("watching %s: %w", dir, err)
		}
		wt := placed[int32(wd)] //nolint:gosec // a watch descriptor is a small int.
		if wt.names == nil {
			wt.names = map[string]bool{}
		}
		for n := range names {
			wt.names[n] = true
		}
		placed[int32(wd)] = wt //nolint:gosec // as above.
	}
	wd, err := syscall.InotifyAddWatch(w.fd, file, syscall.IN_MODIFY|syscall.IN_CLOSE_WRITE|syscall.IN_ATTRIB|selfEvents|syscall.IN_DONT_FOLLOW)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", file, err)
	}
	placed[int32(wd)] = watch{all: true} //nolint:gosec // as above.
	return placed, nil
}

// unwatch removes the watches not in keep and makes keep the set.
func (w *watcher) unwatch(keep map[int32]watch) {
	for wd := range w.watched {
		if _, ok := keep[wd]; !ok {
			_, _ = syscall.InotifyRmWatch(w.fd, uint32(wd)) //nolint:gosec // a watch descriptor the kernel gave.
		}
	}
	if keep == nil {
		keep = map[int32]watch{}
	}
	w.watched = keep
}

// resolve follows path as the kernel does, one name at a time, and
// returns every directory a name was looked up in (with those names) and
// the file it ends at. Each directory is named by its physical path (no
// symbolic link on the way), so a watch placed on it is on the directory
// that was looked in.
func resolve(path string) (map[string]map[string]bool, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	dirs := map[string]map[string]bool{}
	dest := "/"
	rest := strings.Split(abs, "/")
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			dest = filepath.Dir(dest)
			continue
		}
		if dirs[dest] == nil {
			dirs[dest] = map[string]bool{}
		}
		dirs[dest][name] = true
		p := filepath.Join(dest, name)
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			dest = p
			continue
		}
		if links++; links > maxSymlinks {
			return nil, "", fmt.Errorf("%s: more than %d symbolic links", path, maxSymlinks)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return nil, "", err
		}
		if filepath.IsAbs(target) {
			dest = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return dirs, dest, nil
}

// local reports whether the file and every directory looked up in are on
// a file system whose changes this kernel reports.
func local(dirs map[string]map[string]bool, file string) bool {
	var st syscall.Statfs_t
	for dir := range dirs {
		if syscall.Statfs(dir, &st) != nil || !localFilesystems[int64(st.Type)] { //nolint:unconvert // Type is int32 on some platforms.
			return false
		}
	}
	return syscall.Statfs(file, &st) == nil && localFilesystems[int64(st.Type)] //nolint:unconvert // as above.
}

func sameLookups(a, b map[string]map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for dir, names := range a {
		other, ok := b[dir]
		if !ok || len(other) != len(names) {
			return false
		}
		for n := range names {
			if !other[n] {
				return false
			}
		}
	}
	return true
}
