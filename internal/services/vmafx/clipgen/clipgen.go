// Package clipgen writes deterministic YUV4MPEG2 8-bit 4:2:0 clips for
// tests and the demo: a moving pattern (gradients, a bar and a block that
// travel from frame to frame) and, on top, seeded noise of a chosen
// strength — a reference is a clip without noise, a distorted one the same
// pattern with noise.
package clipgen

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// Spec describes a clip.
type Spec struct {
	Width, Height, Frames int
	// Noise is the amplitude of uniform noise added to each luma sample,
	// in levels (0: none).
	Noise int
	// Seed makes the noise reproducible.
	Seed uint64
}

// Write writes the clip to w.
func Write(w io.Writer, s Spec) error {
	if s.Width <= 0 || s.Height <= 0 || s.Frames < 0 {
		return fmt.Errorf("clipgen: %dx%d, %d frames: not a clip", s.Width, s.Height, s.Frames)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	fmt.Fprintf(bw, "YUV4MPEG2 W%d H%d F25:1 Ip A1:1 C420jpeg\n", s.Width, s.Height)
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)) //nolint:gosec // reproducible test noise, not a secret.
	cw, ch := (s.Width+1)/2, (s.Height+1)/2
	luma := make([]byte, s.Width*s.Height)
	chroma := make([]byte, cw*ch)
	for f := range s.Frames {
		for y := range s.Height {
			for x := range s.Width {
				v := (x*255/max(1, s.Width-1) + y*128/max(1, s.Height-1)) / 2 // gradients
				if (x+3*f)%32 < 6 {                                           // a bar moving right
					v = 235
				}
				bx, by := (5*f)%max(1, s.Width), (3*f)%max(1, s.Height)
				if x >= bx && x < bx+s.Width/5 && y >= by && y < by+s.Height/5 { // a block moving down-right
					v = 40 + (x^y)&63
				}
				if s.Noise > 0 {
					v += rng.IntN(2*s.Noise+1) - s.Noise
				}
				luma[y*s.Width+x] = byte(min(255, max(0, v)))
			}
		}
		for i := range chroma {
			chroma[i] = byte(128 + (i+f)%16)
		}
		if _, err := bw.WriteString("FRAME\n"); err != nil {
			return fmt.Errorf("clipgen: %w", err)
		}
		for _, plane := range [][]byte{luma, chroma, chroma} {
			if _, err := bw.Write(plane); err != nil {
				return fmt.Errorf("clipgen: %w", err)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("clipgen: %w", err)
	}
	return nil
}

// WriteFile writes the clip to path.
func WriteFile(path string, s Spec) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("clipgen: %w", err)
	}
	if err := Write(f, s); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// WriteSparse writes a clip of black frames (every sample zero) to path as
// a sparse file: the header and the FRAME markers are written, the frames
// are holes. A long or large clip thus costs no disk, only the node's time
// to read and measure it — what the tests of slow jobs need.
func WriteSparse(path string, width, height, frames int) error {
	if width <= 0 || height <= 0 || frames < 0 {
		return fmt.Errorf("clipgen: %dx%d, %d frames: not a clip", width, height, frames)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("clipgen: %w", err)
	}
	header := fmt.Sprintf("YUV4MPEG2 W%d H%d F25:1 Ip A1:1 C420jpeg\n", width, height)
	frame := int64(width*height + 2*((width+1)/2)*((height+1)/2))
	off := int64(len(header))
	_, err = f.WriteAt([]byte(header), 0)
	for i := 0; i < frames && err == nil; i++ {
		_, err = f.WriteAt([]byte("FRAME\n"), off)
		off += int64(len("FRAME\n")) + frame
	}
	if err == nil {
		err = f.Truncate(off)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("clipgen: %w", err)
	}
	return nil
}
