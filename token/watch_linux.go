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

// watcher tells a [FileSource], for one ioctl on an inotify descriptor,
// whether anything on the way to its file changed since it last looked:
// the directories the path resolves through (each watched for the names
// looked up in it, and for its own move or removal), and the file itself
// (for any write, through whatever link).
//
// It is an optimisation of the stat every call would otherwise make, never
// a source of truth: the source still stats and compares before it
// re-reads, and it stops trusting the watches (and stats on every call)
// whenever they cannot say for sure — a file system that may change
// without telling this kernel, a queue overflow, a read that fails, a path
// that resolved differently after the watches were placed.
type watcher struct {
	h *hub
	// gen is bumped by every event that concerns the path; armed is gen+1
	// while the watches cover the path as it resolved at that generation,
	// 0 when they do not (never placed, a resolution that moved, a file
	// system that may change silently, the descriptor broken).
	gen, armed atomic.Uint64

	// Under h.mu: the watches this watcher holds, and the last arm that
	// could not place them (tried again after an event or after recheck,
	// not on every call).
	held    map[int32]watch
	failed  bool
	tried   uint64
	triedAt time.Time
}

// watch is what one watch descriptor covers for one watcher: the names
// looked up in a directory, or every event (the file itself).
type watch struct {
	names map[string]bool
	all   bool
}

// hub is the process's one inotify instance, shared by every token file
// (an instance is a per-user resource: fs.inotify.max_user_instances,
// often 128, for every process of the user).
type hub struct {
	fd int
	// draining is non-zero while events are being read: a call that finds
	// the queue empty then cannot tell whether its gen is final yet.
	draining atomic.Int32

	mu sync.Mutex // what follows, and reading the queue
	// broken stops every watcher for good (a read error other than
	// "nothing queued"): the sources stat on every call.
	broken bool
	subs   map[int32]map[*watcher]watch
	buf    [4096]byte
}

var (
	theHub     *hub
	theHubOnce sync.Once
)

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
	dirMask    = entryEvents | selfEvents | syscall.IN_ONLYDIR | syscall.IN_DONT_FOLLOW
	fileMask   = syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_ATTRIB | selfEvents | syscall.IN_DONT_FOLLOW
)

// maxDrainReads bounds the reads of the queue one call makes (of
// len(hub.buf) bytes each): a directory on the way that never stops
// changing costs a call at most this much, and the call then stats. (A
// variable for its test.)
var maxDrainReads = 64

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

// newWatcher returns a watcher on the process's inotify instance, nil
// when there is none to be had.
func newWatcher() *watcher {
	theHubOnce.Do(func() {
		fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
		if err == nil {
			theHub = &hub{fd: fd, subs: map[int32]map[*watcher]watch{}}
		}
	})
	if theHub == nil {
		return nil
	}
	return &watcher{h: theHub}
}

// close drops the watcher's watches (its source is gone).
func (w *watcher) close() {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	w.h.hold(w, nil)
}

// current returns the generation, and whether the watches still cover
// the path as it was when they were placed (nothing that concerns it has
// happened since). When the kernel has nothing queued (one ioctl) it reads
// no more; otherwise it reads the queue.
func (w *watcher) current() (gen uint64, ok bool) {
	if w.armed.Load() == 0 {
		// Not watching (a file system that may change silently, a path
		// that would not resolve): the call stats; nothing to ask.
		return w.gen.Load(), false
	}
	// TIOCINQ is FIONREAD: how many bytes of events are queued.
	if n, err := unix.IoctlGetInt(w.h.fd, unix.TIOCINQ); err != nil || n != 0 || w.h.draining.Load() != 0 {
		w.h.mu.Lock()
		w.h.drain()
		w.h.mu.Unlock()
	}
	// Nothing queued, and nobody reading what was: gen is final for every
	// event before this call.
	g := w.gen.Load()
	return g, w.armed.Load() == g+1
}

// drain reads every queued event and bumps the generation of each watcher
// an event concerns. The caller holds mu.
func (h *hub) drain() {
	h.draining.Add(1)
	defer h.draining.Add(-1)
	for reads := 0; !h.broken; reads++ {
		if reads == maxDrainReads {
			// Events keep coming (a busy directory on the way): stop
			// reading for this call and let every watcher look again;
			// the rest is read by the next call.
			for _, ws := range h.subs {
				for w := range ws {
					w.gen.Add(1)
				}
			}
			return
		}
		n, err := syscall.Read(h.fd, h.buf[:])
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return
		case err != nil || n <= 0:
			h.broken = true
			for _, ws := range h.subs {
				for w := range ws {
					w.armed.Store(0)
				}
			}
			return
		}
		h.dispatch(h.buf[:n])
	}
}

// dispatch reads the events in buf (struct inotify_event records: wd,
// mask, cookie, len, then len bytes of NUL-padded name) and bumps the
// generation of every watcher one concerns.
func (h *hub) dispatch(buf []byte) {
	for len(buf) >= syscall.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(buf[0:])) //nolint:gosec // a watch descriptor, an int in the kernel's record.
		mask := binary.NativeEndian.Uint32(buf[4:])
		n := int(binary.NativeEndian.Uint32(buf[12:]))
		end := syscall.SizeofInotifyEvent + n
		if end > len(buf) || mask&syscall.IN_Q_OVERFLOW != 0 {
			// A record cut short (the kernel never does this) or events
			// lost: every watcher looks again.
			for _, ws := range h.subs {
				for w := range ws {
					w.gen.Add(1)
				}
			}
			return
		}
		name := strings.TrimRight(string(buf[syscall.SizeofInotifyEvent:end]), "\x00")
		buf = buf[end:]
		for w, wt := range h.subs[wd] {
			if mask&(lostEvents|selfEvents) != 0 || wt.all || wt.names[name] {
				w.gen.Add(1)
			}
		}
		if mask&syscall.IN_IGNORED != 0 {
			// The kernel removed the watch: nobody holds it any more.
			for w := range h.subs[wd] {
				delete(w.held, wd)
			}
			delete(h.subs, wd)
		}
	}
}

// hold makes placed the watches w holds: it subscribes w to them, and
// removes from the kernel the watches w held that nobody holds now. The
// caller holds mu.
func (h *hub) hold(w *watcher, placed map[int32]watch) {
	for wd := range w.held {
		if _, ok := placed[wd]; ok {
			continue
		}
		delete(h.subs[wd], w)
		if len(h.subs[wd]) == 0 {
			delete(h.subs, wd)
			_, _ = syscall.InotifyRmWatch(h.fd, uint32(wd)) //nolint:gosec // a watch descriptor the kernel gave.
		}
	}
	for wd, wt := range placed {
		if h.subs[wd] == nil {
			h.subs[wd] = map[*watcher]watch{}
		}
		h.subs[wd][w] = wt
	}
	w.held = placed
}

// arm places the watches for the path as it resolves now and returns the
// generation a read made after it belongs to. When the path cannot be
// watched for sure, the watcher is left disarmed: every call stats.
func (w *watcher) arm(path string) uint64 {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drain()
	if h.broken || w.failed && w.tried == w.gen.Load() && time.Since(w.triedAt) < recheck {
		return w.gen.Load()
	}
	w.armed.Store(0)
	w.failed, w.tried, w.triedAt = true, w.gen.Load(), time.Now()
	// The path may change while the watches are placed: resolve it again
	// after, and trust the watches only when both resolutions agree.
	for range 3 {
		dirs, file, err := resolve(path)
		if err != nil || !local(dirs, file) {
			h.hold(w, nil)
			return w.gen.Load()
		}
		placed, err := h.place(dirs, file)
		h.hold(w, placed) // the ones placed, even on an error: dropped with w's next hold
		if err != nil {
			h.hold(w, nil)
			return w.gen.Load()
		}
		again, file2, err := resolve(path)
		if err == nil && file2 == file && sameLookups(dirs, again) {
			h.drain()
			g := w.gen.Load()
			w.armed.Store(g + 1)
			w.failed = false
			return g
		}
	}
	return w.gen.Load()
}

// place adds a watch on every directory looked up in (for the names
// looked up) and on the file, and returns those it placed.
func (h *hub) place(dirs map[string]map[string]bool, file string) (map[int32]watch, error) {
	placed := map[int32]watch{}
	for dir, names := range dirs {
		wd, err := syscall.InotifyAddWatch(h.fd, dir, dirMask)
		if err != nil {
			return placed, fmt.Errorf("watching %s: %w", dir, err)
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
	wd, err := syscall.InotifyAddWatch(h.fd, file, fileMask)
	if err != nil {
		return placed, fmt.Errorf("watching %s: %w", file, err)
	}
	placed[int32(wd)] = watch{all: true} //nolint:gosec // as above.
	return placed, nil
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
