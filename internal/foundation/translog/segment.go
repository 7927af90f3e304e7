package translog

// The write-ahead segment: a header with the tree's right edge at the
// segment's first index, then groups of entries, each a frame:
//
//	header: magic | origin (uint16 length, bytes) | first index (uint64)
//	        | tile levels above 0 (uint8), each: hashes (uint16), 32 bytes each
//	        | CRC-32C of all the above (uint32)
//	frame:  payload length (uint32) | CRC-32C of the payload (uint32)
//	        | payload: first index (uint64) | entries (uint32)
//	          | when it was written (Unix milliseconds, int64)
//	          | each entry: length (uint16) | bytes
//
// All integers are big-endian. A frame's entries are laid out as an
// entry bundle's, so that replaying one is a copy.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

const segMagic = "callerauth translog segment v1\n"

// maxGroupBytes bounds a frame's payload (and so the bytes one write
// takes): a group stops before an entry that would pass it.
const maxGroupBytes = 16 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segment is the open write-ahead segment.
type segment struct {
	f     *os.File
	path  string
	first int64
	end   int64 // bytes written (the next frame's offset)
	// allocated is the file's size: zeros past end, written ahead so
	// that a group's write overwrites blocks the file already has and
	// its fdatasync records no new size (it costs about half).
	allocated int64
}

// preallocate is how far ahead of its frames a segment is zeroed.
const preallocate = 4 << 20

var zeros = make([]byte, 1<<20)

func segmentName(first int64) string { return fmt.Sprintf("%020d.seg", first) }

// segments lists the segment files in dir by first index.
func segments(dir string) ([]int64, error) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var firsts []int64
	for _, e := range names {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
			continue
		}
		if base, ok := strings.CutSuffix(name, ".idx"); ok {
			if n, err := strconv.ParseInt(base, 10, 64); err == nil && indexName(n) == name {
				continue
			}
		}
		base, ok := strings.CutSuffix(name, ".seg")
		n, err := strconv.ParseInt(base, 10, 64)
		if !ok || err != nil || n < 0 || n%tileWidth != 0 || segmentName(n) != name {
			return nil, fmt.Errorf("%s: not a segment of this log", filepath.Join(dir, name))
		}
		firsts = append(firsts, n)
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	return firsts, nil
}

// header is a segment's header for tree t (at a bundle boundary).
func header(origin string, t *tree) []byte {
	b := []byte(segMagic)
	b = binary.BigEndian.AppendUint16(b, uint16(len(origin))) //nolint:gosec // an origin is a key name, far shorter.
	b = append(b, origin...)
	b = binary.BigEndian.AppendUint64(b, uint64(t.size)) //nolint:gosec // a size is not negative.
	levels := max(len(t.partial)-1, 0)
	b = append(b, byte(levels)) //nolint:gosec // tile levels above 0: at most 7.
	for L := 1; L <= levels; L++ {
		b = binary.BigEndian.AppendUint16(b, uint16(len(t.partial[L]))) //nolint:gosec // under 256.
		for _, h := range t.partial[L] {
			b = append(b, h[:]...)
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// readHeader reads a segment's header into a tree (its right edge) and
// returns the header's length.
func readHeader(r *bufio.Reader, origin string) (tree, int64, error) {
	var t tree
	var buf []byte
	read := func(n int) ([]byte, error) {
		start := len(buf)
		buf = append(buf, make([]byte, n)...)
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return nil, fmt.Errorf("the header is cut short: %w", err)
		}
		return buf[start:], nil
	}
	m, err := read(len(segMagic))
	if err != nil {
		return t, 0, err
	}
	if string(m) != segMagic {
		return t, 0, errors.New("not a segment (no magic)")
	}
	n, err := read(2)
	if err != nil {
		return t, 0, err
	}
	o, err := read(int(binary.BigEndian.Uint16(n)))
	if err != nil {
		return t, 0, err
	}
	if string(o) != origin {
		return t, 0, fmt.Errorf("a segment of %q, not of %q", o, origin)
	}
	f, err := read(9)
	if err != nil {
		return t, 0, err
	}
	first := binary.BigEndian.Uint64(f)
	if first > 1<<62 || first%tileWidth != 0 {
		return t, 0, fmt.Errorf("first index %d: not at a bundle's start", first)
	}
	t.size = int64(first)
	t.partial = make([][]tlog.Hash, 1+int(f[8]))
	for L := 1; L < len(t.partial); L++ {
		c, err := read(2)
		if err != nil {
			return t, 0, err
		}
		count := int(binary.BigEndian.Uint16(c))
		if count >= tileWidth {
			return t, 0, fmt.Errorf("%d hashes in a partial tile", count)
		}
		hs, err := read(count * tlog.HashSize)
		if err != nil {
			return t, 0, err
		}
		t.partial[L] = make([]tlog.Hash, count, tileWidth)
		for i := range count {
			copy(t.partial[L][i][:], hs[i*tlog.HashSize:])
		}
	}
	sum := crc32.Checksum(buf, castagnoli)
	c, err := read(4)
	if err != nil {
		return t, 0, err
	}
	if binary.BigEndian.Uint32(c) != sum {
		return t, 0, errors.New("the header does not match its checksum")
	}
	if err := t.fromPartials(); err != nil {
		return t, 0, err
	}
	return t, int64(len(buf)), nil
}

// frameHead is a frame's payload before its entries.
const frameHead = 20

// frame starts a frame in buf for entries from first on, written at at;
// add entries with appendEntry and finish with sealFrame.
func frame(buf []byte, first int64, at time.Time) []byte {
	buf = append(buf[:0], make([]byte, 8)...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(first)) //nolint:gosec // not negative.
	buf = binary.BigEndian.AppendUint32(buf, 0)
	return binary.BigEndian.AppendUint64(buf, uint64(at.UnixMilli()))
}

func appendEntry(buf, data []byte) []byte {
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(data))) //nolint:gosec // bounded by MaxEntryBytes when added.
	return append(buf, data...)
}

// sealFrame writes the frame's lengths and checksum.
func sealFrame(buf []byte, entries int) []byte {
	payload := buf[8:]
	binary.BigEndian.PutUint32(payload[8:], uint32(entries)) //nolint:gosec // bounded by MaxGroup.
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))    //nolint:gosec // bounded by maxGroupBytes.
	binary.BigEndian.PutUint32(buf[4:], crc32.Checksum(payload, castagnoli))
	return buf
}

// frameInfo is what a frame says of itself.
type frameInfo struct {
	first   int64
	entries int
	at      int64 // Unix milliseconds
	size    int64 // the frame's bytes, its header's included
}

// readFrame reads the next frame: what it says of itself, and its
// entries as a bundle. io.EOF at a clean end; errTorn for a frame cut
// short or not matching its checksum.
func readFrame(r *bufio.Reader, buf []byte) (frameInfo, []byte, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return frameInfo{}, nil, io.EOF
		}
		return frameInfo{}, nil, errTorn
	}
	if h == [8]byte{} {
		return frameInfo{}, nil, io.EOF // the zeros written ahead: the end
	}
	n := binary.BigEndian.Uint32(h[:])
	if n < frameHead || n > maxGroupBytes+frameHead {
		return frameInfo{}, nil, errTorn
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return frameInfo{}, nil, errTorn
	}
	if crc32.Checksum(buf, castagnoli) != binary.BigEndian.Uint32(h[4:]) {
		return frameInfo{}, nil, errTorn
	}
	//nolint:gosec // checked against the tree by the caller.
	fi := frameInfo{first: int64(binary.BigEndian.Uint64(buf)), entries: int(binary.BigEndian.Uint32(buf[8:])), at: int64(binary.BigEndian.Uint64(buf[12:])), size: 8 + int64(n)}
	return fi, buf[frameHead:], nil
}

// errTorn: a frame cut short, or not matching its checksum.
var errTorn = errors.New("a torn frame")

// The segment's index, <first>.idx, written when the segment is full:
// where each of its entry bundles starts, and its level-0 tiles.
//
//	magic | first index (uint64) | bundles (uint32)
//	| each bundle: the offset of the frame it starts in (uint64),
//	  the entries of that frame before it (uint16), when that frame was
//	  written (Unix milliseconds, int64)
//	| CRC-32C of all the above (uint32)
//	| each bundle's level-0 tile, 8,192 bytes
//
// The tiles are not in the checksum: every tile read is checked against
// the tree's root (tlog.TileHashReader) before it is used or served.

const idxMagic = "callerauth translog index v1\n"

// bundleLoc is where an entry bundle starts in its segment: in the frame
// at off, after skip of that frame's entries; at is when that frame was
// written (Unix milliseconds), what retention by age goes by.
type bundleLoc struct {
	off  int64
	skip int
	at   int64
}

// sealedSeg is a full segment, with its index.
type sealedSeg struct {
	first, end int64
	locs       []bundleLoc
	tilesOff   int64 // where its index's tiles start
}

// locBytes is a bundle's place in an index.
const locBytes = 18

func indexName(first int64) string { return fmt.Sprintf("%020d.idx", first) }

// encodeIndex is a full segment's index.
func encodeIndex(first int64, locs []bundleLoc, tiles [][]byte) []byte {
	b := []byte(idxMagic)
	b = binary.BigEndian.AppendUint64(b, uint64(first))     //nolint:gosec // not negative.
	b = binary.BigEndian.AppendUint32(b, uint32(len(locs))) //nolint:gosec // bounded by the segment's size.
	for _, l := range locs {
		b = binary.BigEndian.AppendUint64(b, uint64(l.off))  //nolint:gosec // not negative.
		b = binary.BigEndian.AppendUint16(b, uint16(l.skip)) //nolint:gosec // a frame's entries before the bundle: under MaxGroup.
		b = binary.BigEndian.AppendUint64(b, uint64(l.at))   //nolint:gosec // a time after 1970.
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	for _, t := range tiles {
		b = append(b, t...)
	}
	return b
}

// readIndex reads a full segment's index (not its tiles).
func readIndex(path string) (sealedSeg, error) {
	f, err := os.Open(path)
	if err != nil {
		return sealedSeg{}, err
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, len(idxMagic)+12)
	if _, err := io.ReadFull(f, head); err != nil || string(head[:len(idxMagic)]) != idxMagic {
		return sealedSeg{}, fmt.Errorf("%s: not a segment index", path)
	}
	first := int64(binary.BigEndian.Uint64(head[len(idxMagic):])) //nolint:gosec // checked below.
	n := int(binary.BigEndian.Uint32(head[len(idxMagic)+8:]))
	if first < 0 || first%tileWidth != 0 || n < 1 || n > 1<<20 {
		return sealedSeg{}, fmt.Errorf("%s: a segment index of %d bundles from %d", path, n, first)
	}
	body := make([]byte, n*locBytes+4)
	if _, err := io.ReadFull(f, body); err != nil {
		return sealedSeg{}, fmt.Errorf("%s: cut short", path)
	}
	sum := crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, body[:n*locBytes])
	if binary.BigEndian.Uint32(body[n*locBytes:]) != sum {
		return sealedSeg{}, fmt.Errorf("%s: does not match its checksum", path)
	}
	s := sealedSeg{first: first, end: first + int64(n)*tileWidth, locs: make([]bundleLoc, n), tilesOff: int64(len(head) + len(body))}
	for i := range n {
		b := body[i*locBytes:]
		s.locs[i] = bundleLoc{int64(binary.BigEndian.Uint64(b)), int(binary.BigEndian.Uint16(b[8:])), int64(binary.BigEndian.Uint64(b[10:]))} //nolint:gosec // an offset in a file, a time.
	}
	fi, err := f.Stat()
	if err != nil {
		return sealedSeg{}, err
	}
	if fi.Size() != s.tilesOff+int64(n)*tileWidth*tlog.HashSize {
		return sealedSeg{}, fmt.Errorf("%s: %d bytes, not %d", path, fi.Size(), s.tilesOff+int64(n)*tileWidth*tlog.HashSize)
	}
	return s, nil
}

// readBundle reads entry bundle n (entries n*256 on) from the segment at
// path, starting where loc says.
func readBundle(path string, loc bundleLoc, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReaderSize(io.NewSectionReader(f, loc.off, 1<<62), 64<<10)
	var out, buf []byte
	want, skip := n*tileWidth, loc.skip
	got := 0
	for got < tileWidth {
		fi, body, err := readFrame(r, buf)
		if err != nil {
			return nil, fmt.Errorf("%s: reading bundle %d: %w", path, n, err)
		}
		first, entries := fi.first, fi.entries
		if first != want-int64(skip) {
			return nil, fmt.Errorf("%s: bundle %d: a frame from %d where %d was due", path, n, first, want-int64(skip))
		}
		off := 0
		for i := 0; i < entries && got < tileWidth; i++ {
			if off+2 > len(body) {
				return nil, fmt.Errorf("%s: bundle %d: a frame cut short", path, n)
			}
			size := 2 + int(binary.BigEndian.Uint16(body[off:]))
			if i >= skip {
				out = append(out, body[off:off+size]...)
				got++
			}
			off += size
		}
		want, skip = first+int64(entries), 0
		buf = body[:0]
	}
	return out, nil
}
