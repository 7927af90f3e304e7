package translog

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// recover opens the log's directory: the pruned mark, the latest
// checkpoint, and the tree rebuilt from the segment.
func (l *Log) recover() error {
	if err := l.mkdirs(); err != nil {
		return err
	}
	minIdx, err := l.readPruned()
	if err != nil {
		return err
	}
	l.minIdx = minIdx
	if err := l.readCheckpoint(); err != nil {
		return err
	}
	firsts, err := segments(filepath.Join(l.dir, "segments"))
	if err != nil {
		return err
	}
	l.files = newTileWriter(l)
	if len(firsts) == 0 {
		if l.latest.Size > 0 {
			return fmt.Errorf("the checkpoint is of %d entries, and no segment is left: the log is lost", l.latest.Size)
		}
		if l.seg, err = l.createSegment(&l.w); err != nil {
			return err
		}
	} else {
		// Every segment but the newest is full and has its index; the
		// newest is the log's tail, replayed.
		last := firsts[len(firsts)-1]
		for i, first := range firsts[:len(firsts)-1] {
			s, err := readIndex(filepath.Join(l.dir, "segments", indexName(first)))
			if err != nil {
				return err
			}
			if s.first != first || s.end != firsts[i+1] {
				return fmt.Errorf("the segment from %d holds entries to %d, the next starts at %d: a segment is missing", first, s.end, firsts[i+1])
			}
			if s.end <= l.minIdx { // pruned, but for a crash
				if err := l.deleteSegment(first); err != nil {
					return err
				}
				continue
			}
			l.sealed = append(l.sealed, s)
		}
		// The tail's index, if a crash left one, is written again when it
		// is sealed.
		if err := os.Remove(filepath.Join(l.dir, "segments", indexName(last))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := l.replay(last); err != nil {
			return err
		}
	}
	l.written, l.synced = l.w.size, l.w.size
	if l.minIdx > l.w.size {
		return fmt.Errorf("the log is pruned to %d and holds %d entries", l.minIdx, l.w.size)
	}
	if l.w.size == l.seg.first+l.cfg.SegmentEntries {
		if err := l.roll(); err != nil { // a crash before the next segment began
			return err
		}
	}
	if err := l.files.barrier(); err != nil {
		return err
	}
	l.t = l.w
	l.t.partial = append([][]tlog.Hash(nil), l.w.partial...)
	l.active = activeSeg{first: l.seg.first, path: l.seg.path, locs: l.locs}
	return l.extendsCheckpoint()
}

// replay rebuilds the tree from the segment that starts at first, cuts a
// torn tail, and writes the tiles its range filled again.
func (l *Log) replay(first int64) error {
	path := filepath.Join(l.dir, "segments", segmentName(first))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	l.seg = &segment{f: f, path: path, first: first}
	r := bufio.NewReaderSize(f, 1<<20)
	t, off, err := readHeader(r, l.origin)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if t.size != first {
		return fmt.Errorf("%s: its header starts at %d", path, t.size)
	}
	var full []fullTile
	for {
		// A frame's buffer is its own: the partial bundle keeps its entries.
		fi, body, err := readFrame(r, nil)
		start, entries := fi.first, fi.entries
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && start != t.size {
			err = errTorn
		}
		if err == nil {
			frameOff := off
			// Every entry must parse before any is taken.
			next := t
			next.partial = append([][]tlog.Hash(nil), t.partial...)
			full = full[:0]
			off2, count := 0, 0
			for ; off2+2 <= len(body) && err == nil; count++ {
				n := int(body[off2])<<8 | int(body[off2+1])
				if n == 0 || off2+2+n > len(body) {
					err = errTorn
					break
				}
				full, err = next.append(body[off2+2:off2+2+n], full)
				off2 += 2 + n
			}
			if err == nil && (count != entries || off2 != len(body)) {
				err = errTorn
			}
			if err == nil {
				for i := start; i < start+int64(entries); i++ {
					if i%tileWidth == 0 {
						l.locs = append(l.locs, bundleLoc{frameOff, int(i - start), fi.at})
					}
				}
				t = next
				for _, ft := range full {
					l.full[ft.tileKey] = ft.data
					if ft.L > 0 {
						l.files.put(ft)
					}
				}
				off += fi.size
				continue
			}
		}
		// A torn tail: what follows the last whole group goes.
		l.logError("cutting a torn tail off the segment", fmt.Errorf("%s at byte %d: %w", path, off, err))
		if err := f.Truncate(off); err != nil {
			return err
		}
		break
	}
	// Past the last whole group there is nothing to keep: the zeros
	// written ahead, or what a torn tail left.
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.Size() > off {
		if err := f.Truncate(off); err != nil {
			return err
		}
	}
	if err := fdatasync(f); err != nil {
		return err
	}
	l.seg.end, l.seg.allocated = off, off
	l.w = t
	return nil
}

// extendsCheckpoint checks that the rebuilt tree extends the latest
// checkpoint.
func (l *Log) extendsCheckpoint() error {
	c := l.latest
	if c.Note == nil {
		return nil
	}
	if c.Size > l.w.size {
		return fmt.Errorf("the checkpoint is of %d entries, the log holds %d: entries it covers are lost", c.Size, l.w.size)
	}
	root, err := l.TreeHash(c.Size)
	if err != nil {
		return fmt.Errorf("the tree at the checkpoint's size %d: %w", c.Size, err)
	}
	if root != c.Root {
		return fmt.Errorf("the log's tree of %d entries has root %s, the checkpoint says %s: the log does not extend its checkpoint", c.Size, root, c.Root)
	}
	return nil
}

// readCheckpoint reads the latest checkpoint, which must be this log's.
func (l *Log) readCheckpoint() error {
	b, err := os.ReadFile(filepath.Join(l.dir, "checkpoint"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	c, err := OpenCheckpoint(b, l.verifier)
	if err != nil {
		return fmt.Errorf("the checkpoint: %w", err)
	}
	l.latest = c
	return nil
}

// OpenCheckpoint verifies a signed checkpoint with v (whose name is the
// origin) and reads it.
func OpenCheckpoint(signed []byte, v note.Verifier) (Checkpoint, error) {
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("does not verify with %s's key: %w", v.Name(), err)
	}
	origin, size, root, err := ParseCheckpoint(n.Text)
	if err != nil {
		return Checkpoint{}, err
	}
	if origin != v.Name() {
		return Checkpoint{}, fmt.Errorf("a checkpoint of %q, not of %q", origin, v.Name())
	}
	return Checkpoint{Size: size, Root: root, Note: signed}, nil
}

// CheckpointText is a checkpoint's note text (C2SP tlog-checkpoint): the
// origin, the tree size in decimal and the root hash in standard base64,
// each on a line of its own.
func CheckpointText(origin string, size int64, root tlog.Hash) string {
	return origin + "\n" + strconv.FormatInt(size, 10) + "\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
}

// ParseCheckpoint reads a checkpoint's note text: its origin, size and
// root. Extension lines are refused (this log writes none).
func ParseCheckpoint(text string) (origin string, size int64, root tlog.Hash, err error) {
	lines := strings.Split(text, "\n")
	if len(lines) != 4 || lines[3] != "" || lines[0] == "" {
		return "", 0, root, errors.New("a checkpoint is three lines: origin, size, root hash")
	}
	size, err = strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return "", 0, root, fmt.Errorf("checkpoint size %q: want a decimal with no leading zero", lines[1])
	}
	h, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(h) != tlog.HashSize {
		return "", 0, root, fmt.Errorf("checkpoint root %q: want a base64 SHA-256 hash", lines[2])
	}
	copy(root[:], h)
	return lines[0], size, root, nil
}
