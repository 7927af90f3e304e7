package translog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/tlog"
)

// crashHook, when set (by a test), is called at each point of a write
// where a crash must lose nothing acknowledged.
var crashHook func(point string)

func crashPoint(point string) {
	if crashHook != nil {
		crashHook(point)
	}
}

// TilePath is t's tlog-tiles path (tile/<L>/<N>[.p/<W>], or
// tile/entries/… for L -1): x/mod's path less its height.
func TilePath(t tlog.Tile) string {
	p := strings.Replace(t.Path(), fmt.Sprintf("tile/%d/", t.H), "tile/", 1)
	if t.L == -1 {
		p = strings.Replace(p, "tile/data/", "tile/entries/", 1)
	}
	return p
}

// parseTile reads a tlog-tiles path (tile/<L>/<N>[.p/<W>] or
// tile/entries/<N>[.p/<W>]) with x/mod's parser of the same coordinates
// in the Go checksum database's spelling (tile/8/<L>/…, tile/8/data/…),
// which also refuses any path that is not the canonical one. L is -1
// for an entry bundle.
func parseTile(path string) (tlog.Tile, bool) {
	rest, ok := strings.CutPrefix(path, "tile/")
	if !ok {
		return tlog.Tile{}, false
	}
	if after, isEntries := strings.CutPrefix(rest, "entries/"); isEntries {
		rest = "data/" + after
	} else if strings.HasPrefix(rest, "data/") {
		return tlog.Tile{}, false
	}
	t, err := tlog.ParseTilePath(fmt.Sprintf("tile/%d/%s", TileHeight, rest))
	if err != nil || t.L > 7 {
		return tlog.Tile{}, false
	}
	return t, true
}

// tileFile is where full tile k lives.
func (l *Log) tileFile(k tileKey) string {
	return filepath.Join(l.dir, filepath.FromSlash(TilePath(k.tile())))
}

// writeFile writes data to path by a temporary file renamed over it,
// fdatasync'd first; the directory is not synced (syncDir).
func writeFile(path string, data []byte, point string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	half := len(data) / 2
	_, err = f.Write(data[:half])
	if err == nil {
		if point != "" {
			crashPoint(point)
		}
		_, err = f.Write(data[half:])
	}
	if err == nil {
		err = fdatasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// syncDir makes a directory's entries (a rename, a new file) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// tileWriter writes full tiles above level 0 to their files, off Run's
// path, and tells Log to read them from there.
type tileWriter struct {
	l    *Log
	work chan fullTile
	mu   sync.Mutex
	// dirs are the directories given a new file since the last barrier.
	dirs    map[string]bool
	err     error
	pending sync.WaitGroup
	stop    chan struct{}
	done    chan struct{}
}

func newTileWriter(l *Log) *tileWriter {
	w := &tileWriter{l: l, work: make(chan fullTile, 64), dirs: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *tileWriter) run() {
	defer close(w.done)
	for {
		select {
		case t := <-w.work:
			w.write(t)
		case <-w.stop:
			for {
				select {
				case t := <-w.work:
					w.write(t)
				default:
					return
				}
			}
		}
	}
}

// put hands a full tile over; Run's memory keeps serving it until its
// file is there.
func (w *tileWriter) put(t fullTile) {
	w.pending.Add(1)
	w.work <- t
}

func (w *tileWriter) write(t fullTile) {
	defer w.pending.Done()
	path := w.l.tileFile(t.tileKey)
	err := writeFile(path, t.data, "tile-write")
	w.mu.Lock()
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("writing %s: %w", path, err)
	}
	w.dirs[filepath.Dir(path)] = true
	w.mu.Unlock()
	if err == nil {
		w.l.mu.Lock()
		delete(w.l.full, t.tileKey)
		w.l.mu.Unlock()
	}
}

// barrier waits for every tile handed over so far to be in its file, and
// makes their directories durable.
func (w *tileWriter) barrier() error {
	w.pending.Wait()
	w.mu.Lock()
	dirs, err := w.dirs, w.err
	w.dirs = map[string]bool{}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	for d := range dirs {
		// A new directory's own entry is in its parent.
		for p := d; p != w.l.dir && strings.HasPrefix(p, w.l.dir); p = filepath.Dir(p) {
			if err := syncDir(p); err != nil {
				return err
			}
			if !dirs[filepath.Dir(p)] {
				break
			}
		}
	}
	return nil
}

// close stops the writer once it has written what it was given.
func (w *tileWriter) close() error {
	close(w.stop)
	<-w.done
	return w.barrier()
}

// readTile reads the first w hashes of full hash tile k: from memory
// while its file (or its segment's index) is being written, else from
// there.
func (l *Log) readTile(k tileKey, w int) ([]byte, error) {
	l.mu.RLock()
	b, inMemory := l.full[k]
	l.mu.RUnlock()
	if !inMemory {
		var err error
		if k.L == 0 {
			b, err = l.levelZeroTile(k.N)
		} else if b, err = os.ReadFile(l.tileFile(k)); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: tile %s", ErrNotHeld, TilePath(k.tile()))
		}
		if err != nil {
			return nil, err
		}
	}
	if len(b) != tileWidth*tlog.HashSize {
		return nil, fmt.Errorf("the tile %s is %d bytes, not %d: damaged", TilePath(k.tile()), len(b), tileWidth*tlog.HashSize)
	}
	return b[:w*tlog.HashSize], nil
}
