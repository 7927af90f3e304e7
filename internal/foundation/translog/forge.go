package translog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// Forge is what someone with write access to a stopped log's directory
// can do: entry index's bytes in its segment replaced by data (of the
// same length), its group's checksum made to match, so that nothing but
// the tree tells. In the newest segment, Open then refuses the log (its
// tree no longer extends the latest checkpoint); in a full one, the
// entry no longer proves, VerifiedEntry refuses it, and its bundle no
// longer matches the tiles an auditor reads. For drills and tests.
func Forge(dir, origin string, index int64, data []byte) error {
	firsts, err := segments(filepath.Join(dir, "segments"))
	if err != nil || len(firsts) == 0 {
		return fmt.Errorf("no segment: %w", err)
	}
	seg := firsts[0]
	for _, f := range firsts {
		if f <= index {
			seg = f
		}
	}
	path := filepath.Join(dir, "segments", segmentName(seg))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReader(f)
	_, off, err := readHeader(r, origin)
	if err != nil {
		return err
	}
	for {
		fi, body, err := readFrame(r, nil)
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("entry %d is not in the segment %s", index, path)
		}
		if err != nil {
			return err
		}
		first, entries := fi.first, fi.entries
		if index < first || index >= first+int64(entries) {
			off += fi.size
			continue
		}
		pos := 0
		for i := first; i < index; i++ {
			pos += 2 + int(binary.BigEndian.Uint16(body[pos:]))
		}
		if n := int(binary.BigEndian.Uint16(body[pos:])); n != len(data) {
			return fmt.Errorf("entry %d is %d bytes, the forgery %d", index, n, len(data))
		}
		copy(body[pos+2:], data)
		payload := make([]byte, 0, frameHead+len(body))
		payload = binary.BigEndian.AppendUint64(payload, uint64(first))   //nolint:gosec // not negative.
		payload = binary.BigEndian.AppendUint32(payload, uint32(entries)) //nolint:gosec // bounded.
		payload = binary.BigEndian.AppendUint64(payload, uint64(fi.at))   //nolint:gosec // a time after 1970.
		payload = append(payload, body...)
		var h [8]byte
		binary.BigEndian.PutUint32(h[:], uint32(len(payload))) //nolint:gosec // bounded.
		binary.BigEndian.PutUint32(h[4:], crc32.Checksum(payload, castagnoli))
		if _, err := f.WriteAt(append(h[:], payload...), off); err != nil {
			return err
		}
		return nil
	}
}
