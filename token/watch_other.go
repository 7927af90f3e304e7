//go:build !linux

package token

// watcher is Linux's inotify; elsewhere a [FileSource] stats on every
// call.
type watcher struct{}

func newWatcher() *watcher { return nil }

func (*watcher) close() {}

func (*watcher) current() (uint64, bool) { return 0, false }

func (*watcher) arm(string) uint64 { return 0 }
