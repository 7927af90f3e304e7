package translog

// The write-ahead segment: a header with the tree's right edge at the
// segment's first index, then groups of entries, each a frame:
//
//	header: magic | origin (uint16 length, bytes) | first index (uint64)
//	        | tile levels above 0 (uint8), each: hashes (uint16), 32 bytes each
//	        | CRC-32C of all the above (uint32)
//	frame:  payload length (uint32) | CRC-32C of the payload (uint32)
//	        | payload: first index (uint64) | entries (uint32)
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
}

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
	b = append(b, byte(levels))
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

// frame starts a frame in buf for entries from first on; add entries
// with appendEntry and finish with sealFrame.
func frame(buf []byte, first int64) []byte {
	buf = append(buf[:0], make([]byte, 8)...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(first)) //nolint:gosec // not negative.
	return binary.BigEndian.AppendUint32(buf, 0)
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

// readFrame reads the next frame's payload: its first index and its
// entries as a bundle. io.EOF at a clean end; errTorn for a frame cut
// short or not matching its checksum.
func readFrame(r *bufio.Reader, buf []byte) (first int64, entries int, body []byte, err error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, 0, nil, io.EOF
		}
		return 0, 0, nil, errTorn
	}
	n := binary.BigEndian.Uint32(h[:])
	if n < 12 || n > maxGroupBytes+12 {
		return 0, 0, nil, errTorn
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, 0, nil, errTorn
	}
	if crc32.Checksum(buf, castagnoli) != binary.BigEndian.Uint32(h[4:]) {
		return 0, 0, nil, errTorn
	}
	return int64(binary.BigEndian.Uint64(buf)), int(binary.BigEndian.Uint32(buf[8:])), buf[12:], nil //nolint:gosec // checked against the tree's size by the caller.
}

// errTorn: a frame cut short, or not matching its checksum.
var errTorn = errors.New("a torn frame")
