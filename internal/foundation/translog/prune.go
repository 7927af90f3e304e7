package translog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The pruned mark, `pruned`: "<minimum index> <deleted from>\n". Prune
// writes the new minimum first, then deletes the bundles and level-0
// tiles below it, then marks them deleted; Open finishes what a crash
// left.

func (l *Log) readPruned() (minIdx, deletedFrom int64, err error) {
	b, err := os.ReadFile(filepath.Join(l.dir, "pruned"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		minIdx, err = strconv.ParseInt(f[0], 10, 64)
		if err == nil {
			deletedFrom, err = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if len(f) != 2 || err != nil || minIdx < 0 || deletedFrom < 0 || deletedFrom > minIdx || minIdx%tileWidth != 0 || deletedFrom%tileWidth != 0 {
		return 0, 0, fmt.Errorf("%s: %q is not a pruned mark", filepath.Join(l.dir, "pruned"), b)
	}
	return minIdx, deletedFrom, nil
}

func (l *Log) writePruned(minIdx, deletedFrom int64) error {
	if err := writeFile(filepath.Join(l.dir, "pruned"), fmt.Appendf(nil, "%d %d\n", minIdx, deletedFrom), ""); err != nil {
		return err
	}
	return syncDir(l.dir)
}

// maxBundlesAPrune bounds the files one Prune deletes: a log far behind
// its retention catches up over several.
const maxBundlesAPrune = 4096

// Prune moves the log's minimum index up to below (rounded down to a
// whole bundle of 256, and never past the latest checkpoint, nor more
// than 4,096 bundles at a time) and deletes the entry bundles and level-0
// tiles below it. It returns the new minimum index. Run calls it
// (ApplyRetention asks it to); call it only while Run does not run.
func (l *Log) Prune(below int64) (int64, error) {
	l.mu.RLock()
	from, latest := l.minIdx, l.latest.Size
	l.mu.RUnlock()
	to := min(below, latest) &^ (tileWidth - 1)
	to = min(to, from+maxBundlesAPrune*tileWidth)
	if to <= from {
		return from, nil
	}
	if err := l.writePruned(to, from); err != nil {
		return from, err
	}
	crashPoint("prune-marked")
	l.mu.Lock()
	l.minIdx = to
	l.mu.Unlock()
	l.m.minIndex.Set(float64(to))
	return to, l.deletePruned(from, to)
}

// deletePruned deletes the bundles and level-0 tiles of [from, to).
func (l *Log) deletePruned(from, to int64) error {
	for n := from >> TileHeight; n < to>>TileHeight; n++ {
		for _, k := range []tileKey{{-1, n}, {0, n}} {
			if err := os.Remove(l.tileFile(k)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		crashPoint("prune-deleting")
	}
	return l.writePruned(to, to)
}

// applyRetention prunes what Config.Retention no longer keeps: the
// bundles whose files were written longer ago than MaxAge, and the
// oldest past MaxEntries.
func (l *Log) applyRetention() (int64, error) {
	r := l.cfg.Retention
	l.mu.RLock()
	from, size := l.minIdx, l.t.size
	l.mu.RUnlock()
	to := from
	if r.MaxEntries > 0 {
		to = max(to, size-r.MaxEntries)
	}
	if r.MaxAge > 0 {
		// Bundles are written in order: the first one young enough
		// bounds what goes (bisected by its file's time).
		cutoff := l.cfg.Now().Add(-r.MaxAge)
		lo, hi := from>>TileHeight, size>>TileHeight // bundles [lo, hi) are full
		for lo < hi {
			mid := lo + (hi-lo)/2
			fi, err := os.Stat(l.tileFile(tileKey{-1, mid}))
			if err == nil && fi.ModTime().Before(cutoff) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		to = max(to, lo<<TileHeight)
	}
	return l.Prune(to)
}
