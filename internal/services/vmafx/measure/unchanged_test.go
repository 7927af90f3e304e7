package measure_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
	"github.com/callerauth/callerauth/internal/services/vmafx/measure"
)

// plainPSNR and plainSSIM are the first implementations, kept as written:
// the definitions the faster ones must reproduce bit for bit.
func plainPSNR(a, b []byte) float64 {
	var sum int64
	for i := range a {
		d := int64(a[i]) - int64(b[i])
		sum += d * d
	}
	if sum == 0 {
		return measure.MaxPSNR
	}
	mse := float64(sum) / float64(len(a))
	return math.Min(measure.MaxPSNR, 10*math.Log10(255*255/mse))
}

func plainSSIM(a, b []byte, width, height int) float64 {
	bw, bh := width>>2, height>>2
	if bw < 2 || bh < 2 {
		if slices.Equal(a, b) {
			return 1
		}
		return 0
	}
	prev, cur := make([]int, 4*bw), make([]int, 4*bw)
	var total float64
	blockRow := func(dst []int, z int) {
		for x := range bw {
			var s1, s2, ss, s12 int
			for y := range 4 {
				row := (4*z+y)*width + 4*x
				for i := range 4 {
					p, q := int(a[row+i]), int(b[row+i])
					s1 += p
					s2 += q
					ss += p*p + q*q
					s12 += p * q
				}
			}
			dst[4*x], dst[4*x+1], dst[4*x+2], dst[4*x+3] = s1, s2, ss, s12
		}
	}
	window := func(s1, s2, ss, s12 int) float64 {
		const c1, c2 = 416, 235963
		vars := ss*64 - s1*s1 - s2*s2
		covar := s12*64 - s1*s2
		return float64(2*s1*s2+c1) * float64(2*covar+c2) / (float64(s1*s1+s2*s2+c1) * float64(vars+c2))
	}
	blockRow(cur, 0)
	for z := 1; z < bh; z++ {
		prev, cur = cur, prev
		blockRow(cur, z)
		for x := 0; x < bw-1; x++ {
			s := func(k int) int { return prev[4*x+k] + prev[4*x+4+k] + cur[4*x+k] + cur[4*x+4+k] }
			total += window(s(0), s(1), s(2), s(3))
		}
	}
	return total / float64((bh-1)*(bw-1))
}

// TestSSIMUnchanged: on planes of many sizes (odd widths and heights, a
// width not a multiple of 4 or 8, planes too small for a window) and
// contents (noise, flat, extremes, one a shifted copy of the other), the
// measured PSNR and SSIM equal the first implementation's exactly.
func TestSSIMUnchanged(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var scratch []int
	sizes := [][2]int{{8, 8}, {7, 9}, {9, 7}, {13, 17}, {64, 36}, {65, 37}, {130, 66}, {321, 181}, {1920, 8}, {4, 4}, {3, 3}}
	for _, sz := range sizes {
		w, h := sz[0], sz[1]
		for kind := range 5 {
			a, b := make([]byte, w*h), make([]byte, w*h)
			for i := range a {
				switch kind {
				case 0:
					a[i], b[i] = byte(r.IntN(256)), byte(r.IntN(256))
				case 1:
					a[i] = byte(r.IntN(256))
					b[i] = byte(min(255, max(0, int(a[i])+r.IntN(17)-8)))
				case 2:
					a[i], b[i] = 128, 128
				case 3:
					a[i], b[i] = 0, 255
				case 4:
					a[i] = byte(i % 251)
					b[i] = byte((i + 1) % 251)
				}
			}
			if got, want := measure.LumaSSIM(a, b, w, h, &scratch), plainSSIM(a, b, w, h); got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Errorf("%dx%d kind %d: SSIM %v, the plain loop %v", w, h, kind, got, want)
			}
			if got, want := measure.LumaPSNR(a, b), plainPSNR(a, b); got != want {
				t.Errorf("%dx%d kind %d: PSNR %v, the plain loop %v", w, h, kind, got, want)
			}
			p, s := measure.LumaBoth(a, b, w, h, &scratch)
			if ws := plainSSIM(a, b, w, h); p != plainPSNR(a, b) || (s != ws && !(math.IsNaN(s) && math.IsNaN(ws))) {
				t.Errorf("%dx%d kind %d: both in one pass %v %v, the plain loops %v %v", w, h, kind, p, s, plainPSNR(a, b), ws)
			}
		}
	}
}

// BenchmarkLuma1080p: one 1920x1080 frame pair through each metric, as
// frames a second (the node's inner loops, one core).
func BenchmarkLuma1080p(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	w, h := 1920, 1080
	a, d := make([]byte, w*h), make([]byte, w*h)
	for i := range a {
		a[i] = byte(r.IntN(256))
		d[i] = byte(min(255, max(0, int(a[i])+r.IntN(17)-8)))
	}
	var scratch []int
	b.Run("ssim", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			measure.LumaSSIM(a, d, w, h, &scratch)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	})
	b.Run("ssim-plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			plainSSIM(a, d, w, h)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	})
	b.Run("psnr", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			measure.LumaPSNR(a, d)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	})
	b.Run("psnr-plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			plainPSNR(a, d)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	})
}

// TestSkippedChromaTruncated: a frame whose chroma is cut short is
// truncated though no metric reads the chroma — also when the planes are
// larger than the read buffer and skipped by seeking the file — and a
// whole clip measures the same through a file (seeking) as through a
// stream (reading).
func TestSkippedChromaTruncated(t *testing.T) {
	dir := t.TempDir()
	var whole bytes.Buffer
	if err := clipgen.Write(&whole, clipgen.Spec{Width: 640, Height: 480, Frames: 3, Noise: 5}); err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, 1000, 640 * 480 / 4} {
		p := filepath.Join(dir, fmt.Sprintf("cut%d.y4m", cut))
		if err := os.WriteFile(p, whole.Bytes()[:whole.Len()-cut], 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := measure.NewReader(p, f)
		if err != nil {
			t.Fatal(err)
		}
		var last error
		for range 3 {
			if _, last = r.Next(); last != nil {
				break
			}
		}
		_ = f.Close()
		if last == nil || !strings.Contains(last.Error(), "frame 3 is truncated") {
			t.Errorf("chroma cut by %d bytes: %v", cut, last)
		}
	}
	p := filepath.Join(dir, "whole.y4m")
	if err := os.WriteFile(p, whole.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fromFile, err := measure.Clips(context.Background(), "a", f, "b", bytes.NewReader(whole.Bytes()), []string{measure.PSNR, measure.SSIM}, measure.Options{KeepPerFrame: true})
	if err != nil {
		t.Fatal(err)
	}
	if fromFile[0].Frames != 3 || fromFile[0].Mean != measure.MaxPSNR || fromFile[1].Mean != 1 {
		t.Fatalf("a clip against itself, one through a file: %+v", fromFile)
	}
}
