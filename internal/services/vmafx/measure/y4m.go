// Package measure computes the vmafx node's quality metrics: luma PSNR and
// SSIM per frame between two YUV4MPEG2 (Y4M) 8-bit 4:2:0 clips of equal
// size and frame count, and their mean and minimum over the clip. The clips
// are streamed frame by frame: memory holds a few frames (two per core
// measuring, and two being read), never the clip.
//
// The definitions are ffmpeg's psnr and ssim filters', so that the figures
// agree with them (checked against the real ffmpeg in the tests): PSNR is
// 10·log10(255²/MSE) of the luma plane; SSIM is computed on overlapping 8×8
// windows stepped by 4 pixels (sums of 4×4 blocks), averaged over the plane.
package measure

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Header is a Y4M stream header.
type Header struct {
	Width, Height int
	// Colorspace is the C parameter, "420jpeg" when absent.
	Colorspace string
}

// frameSize is the bytes of one 4:2:0 frame.
func (h Header) frameSize() int {
	cw, ch := (h.Width+1)/2, (h.Height+1)/2
	return h.Width*h.Height + 2*cw*ch
}

// maxDimension bounds a frame's width and height.
const maxDimension = 16384

// Reader reads Y4M frames one at a time.
type Reader struct {
	Header Header
	name   string
	r      *bufio.Reader
	frame  []byte
	n      int
	// src is the stream under r; seeker, when it can seek (a file), lets
	// the chroma planes be skipped instead of read, size bounding where.
	src    io.Reader
	seeker io.Seeker
	size   int64
}

// NewReader reads the stream header. name labels errors (the file).
func NewReader(name string, r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	line, err := readLine(br, 1024)
	if err != nil {
		return nil, fmt.Errorf("measure: %s: reading the Y4M header: %w", name, err)
	}
	fields := strings.Fields(line)
	if len(fields) == 0 || fields[0] != "YUV4MPEG2" {
		return nil, fmt.Errorf("measure: %s: not a YUV4MPEG2 stream (no YUV4MPEG2 signature)", name)
	}
	h := Header{Colorspace: "420jpeg"}
	for _, f := range fields[1:] {
		if f == "" {
			continue
		}
		v := f[1:]
		switch f[0] {
		case 'W':
			h.Width, err = strconv.Atoi(v)
		case 'H':
			h.Height, err = strconv.Atoi(v)
		case 'C':
			h.Colorspace = v
		}
		if err != nil {
			return nil, fmt.Errorf("measure: %s: header parameter %q: %w", name, f, err)
		}
	}
	switch {
	case h.Width <= 0 || h.Height <= 0 || h.Width > maxDimension || h.Height > maxDimension:
		return nil, fmt.Errorf("measure: %s: frame size %dx%d is not one this node measures (1 to %d pixels each way)", name, h.Width, h.Height, maxDimension)
	case !slices.Contains([]string{"420", "420jpeg", "420mpeg2", "420paldv"}, h.Colorspace):
		// 420p10 and the like are deeper; 422, 444, mono are other layouts.
		return nil, fmt.Errorf("measure: %s: colorspace C%s; this node measures 8-bit 4:2:0 only (C420, C420jpeg, C420mpeg2, C420paldv)", name, h.Colorspace)
	}
	// The frame is allocated on the first Next, after the caller has had the
	// header to check against its limits.
	rd := &Reader{Header: h, name: name, r: br, src: r}
	if sk, ok := r.(io.Seeker); ok {
		// The stream's size, and back to where it was read up to.
		if cur, err := sk.Seek(0, io.SeekCurrent); err == nil {
			if size, err := sk.Seek(0, io.SeekEnd); err == nil {
				if _, err := sk.Seek(cur, io.SeekStart); err == nil {
					rd.seeker, rd.size = sk, size
				}
			}
		}
	}
	return rd, nil
}

// Next reads the next frame and returns its luma plane (valid until the
// next call). It returns io.EOF after the last frame.
func (r *Reader) Next() ([]byte, error) {
	if r.frame == nil {
		r.frame = make([]byte, r.Header.frameSize())
	}
	return r.NextInto(r.frame)
}

// FrameSize is the bytes of one frame, the size NextInto reads into.
func (r *Reader) FrameSize() int { return r.Header.frameSize() }

// NextInto reads the next frame into buf (FrameSize bytes) and returns its
// luma plane, a part of buf. It returns io.EOF after the last frame.
func (r *Reader) NextInto(buf []byte) ([]byte, error) {
	line, err := readLine(r.r, 1024)
	if errors.Is(err, io.EOF) && line == "" {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("measure: %s: frame %d: %w", r.name, r.n+1, err)
	}
	if line != "FRAME" && !strings.HasPrefix(line, "FRAME ") {
		return nil, fmt.Errorf("measure: %s: frame %d: expected a FRAME marker", r.name, r.n+1)
	}
	luma := r.Header.Width * r.Header.Height
	buf = buf[:r.Header.frameSize()]
	if _, err := io.ReadFull(r.r, buf[:luma]); err != nil {
		return nil, fmt.Errorf("measure: %s: frame %d is truncated: %w", r.name, r.n+1, err)
	}
	if err := r.skipChroma(buf[luma:]); err != nil {
		return nil, fmt.Errorf("measure: %s: frame %d is truncated: %w", r.name, r.n+1, err)
	}
	r.n++
	return buf[:luma], nil
}

// skipChroma passes over a frame's chroma planes (len(buf) bytes), which
// no metric reads: from the buffer as far as it holds them, the rest by
// seeking the file (a third of the bytes never copied), else read into
// buf. A seek past the end is a truncated frame.
func (r *Reader) skipChroma(buf []byte) error {
	n := len(buf)
	if r.seeker == nil || r.r.Buffered() >= n {
		_, err := io.ReadFull(r.r, buf)
		return err
	}
	held := r.r.Buffered()
	if _, err := r.r.Discard(held); err != nil {
		return err
	}
	pos, err := r.seeker.Seek(int64(n-held), io.SeekCurrent)
	if err != nil {
		return err
	}
	if pos > r.size {
		return io.ErrUnexpectedEOF
	}
	r.r.Reset(r.src)
	return nil
}

// Frames is how many frames have been read.
func (r *Reader) Frames() int { return r.n }

// readLine reads up to '\n', at most limit bytes.
func readLine(r *bufio.Reader, limit int) (string, error) {
	var b []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			return string(b), err
		}
		if c == '\n' {
			return string(b), nil
		}
		if len(b) >= limit {
			return "", fmt.Errorf("line longer than %d bytes", limit)
		}
		b = append(b, c)
	}
}
