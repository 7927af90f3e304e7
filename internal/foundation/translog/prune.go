package translog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The pruned mark, `pruned`: the log's minimum index, in decimal. Prune
// writes it first, then deletes the segments wholly below it; Open
// deletes what a crash left.

func (l *Log) readPruned() (int64, error) {
	b, err := os.ReadFile(filepath.Join(l.dir, "pruned"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	minIdx, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || minIdx < 0 || minIdx%tileWidth != 0 {
		return 0, fmt.Errorf("%s: %q is not a pruned mark", filepath.Join(l.dir, "pruned"), b)
	}
	return minIdx, nil
}

func (l *Log) writePruned(minIdx int64) error {
	if err := writeFile(filepath.Join(l.dir, "pruned"), fmt.Appendf(nil, "%d\n", minIdx), ""); err != nil {
		return err
	}
	return syncDir(l.dir)
}

// Prune moves the log's minimum index up to below (rounded down to a
// whole bundle of 256, never past the latest checkpoint): the entries
// below it are no longer served, and the full segments wholly below it
// — their entries, their bundles and their level-0 tiles — are deleted
// (the one being written, once it is full and the next prune runs). The tiles above level 0 stay, so
// that every proof among what is left still verifies. It returns the
// new minimum index. Run calls it (ApplyRetention asks it to).
func (l *Log) Prune(below int64) (int64, error) {
	l.mu.RLock()
	from, latest := l.minIdx, l.latest.Size
	l.mu.RUnlock()
	to := min(below, latest) &^ (tileWidth - 1)
	if to <= from {
		return from, nil
	}
	if err := l.writePruned(to); err != nil {
		return from, err
	}
	crashPoint("prune-marked")
	l.mu.Lock()
	l.minIdx = to
	var gone []int64
	kept := l.sealed[:0]
	for _, s := range l.sealed {
		if s.end <= to {
			gone = append(gone, s.first)
			continue
		}
		kept = append(kept, s)
	}
	l.sealed = kept
	l.mu.Unlock()
	l.m.minIndex.Set(float64(to))
	for _, first := range gone {
		if err := l.deleteSegment(first); err != nil {
			return to, err
		}
		crashPoint("prune-deleting")
	}
	return to, nil
}

// deleteSegment deletes a segment and its index.
func (l *Log) deleteSegment(first int64) error {
	for _, name := range []string{segmentName(first), indexName(first)} {
		if err := os.Remove(filepath.Join(l.dir, "segments", name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// applyRetention prunes what Config.Retention no longer keeps: the
// bundles written longer ago than MaxAge, and the oldest past
// MaxEntries.
func (l *Log) applyRetention() (int64, error) {
	r := l.cfg.Retention
	l.mu.RLock()
	from, size := l.minIdx, l.t.size
	var cut int64 = -1
	if r.MaxAge > 0 {
		// Bundles are written in order: the first young enough bounds
		// what goes.
		cutoff := l.cfg.Now().Add(-r.MaxAge).UnixMilli()
		cut = size &^ (tileWidth - 1)
		for _, s := range append(append([]sealedSeg(nil), l.sealed...), sealedSeg{first: l.active.first, locs: l.active.locs}) {
			for i, loc := range s.locs {
				if loc.at >= cutoff {
					cut = min(cut, s.first+int64(i)*tileWidth)
				}
			}
			if cut < size&^(tileWidth-1) {
				break
			}
		}
	}
	l.mu.RUnlock()
	to := max(from, cut)
	if r.MaxEntries > 0 {
		to = max(to, size-r.MaxEntries)
	}
	return l.Prune(to)
}
