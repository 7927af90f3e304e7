package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// Metric names.
const (
	PSNR = "psnr"
	SSIM = "ssim"
)

// Known lists the metrics a node measures.
var Known = []string{PSNR, SSIM}

// MaxPSNR is the PSNR of identical frames: the MSE is zero and the ratio
// infinite, so the frame is scored this many decibels (ffmpeg prints inf
// for such a frame; a finite cap keeps the mean meaningful).
const MaxPSNR = 100.0

// LumaPSNR is the PSNR of two luma planes of equal size, in dB.
func LumaPSNR(a, b []byte) float64 {
	var sum int64
	for i := range a {
		d := int64(a[i]) - int64(b[i])
		sum += d * d
	}
	if sum == 0 {
		return MaxPSNR
	}
	mse := float64(sum) / float64(len(a))
	return math.Min(MaxPSNR, 10*math.Log10(255*255/mse))
}

// LumaSSIM is the SSIM of two luma planes of width×height, as ffmpeg's ssim
// filter computes it: sums over 4×4 blocks, combined into overlapping 8×8
// windows stepped by 4, the SSIM formula per window with C1 = (0.01·255)²
// and C2 = (0.03·255)² scaled to the window's 64 samples, averaged over the
// windows. A plane smaller than 8×8 has no window; its SSIM is 1 when equal.
func LumaSSIM(a, b []byte, width, height int, scratch *[]int) float64 {
	bw, bh := width>>2, height>>2
	if bw < 2 || bh < 2 {
		if slices.Equal(a, b) {
			return 1
		}
		return 0
	}
	need := 2 * 4 * bw
	if cap(*scratch) < need {
		*scratch = make([]int, need)
	}
	sums := (*scratch)[:need]
	prev, cur := sums[:4*bw], sums[4*bw:]
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

// window is the SSIM of one 8×8 window from its sums.
func window(s1, s2, ss, s12 int) float64 {
	// (0.01·255)²·64 and (0.03·255)²·64·63, rounded: ffmpeg's constants.
	const c1, c2 = 416, 235963
	vars := ss*64 - s1*s1 - s2*s2
	covar := s12*64 - s1*s2
	return float64(2*s1*s2+c1) * float64(2*covar+c2) / (float64(s1*s1+s2*s2+c1) * float64(vars+c2))
}

// Score is one metric over a clip.
type Score struct {
	Metric    string
	Mean, Min float64
	Frames    int64
	// PerFrame holds every frame's value when asked for (tests, debugging).
	PerFrame []float64
}

// Options tune [Clips].
type Options struct {
	// Progress is called after each frame with the frames done so far.
	Progress func(frames int)
	// KeepPerFrame keeps every frame's value in the scores.
	KeepPerFrame bool
}

// ParseMetrics checks the metrics asked for, naming an unknown one.
func ParseMetrics(metrics []string) error {
	if len(metrics) == 0 {
		return errors.New("measure: no metric asked for (want psnr, ssim or both)")
	}
	for _, m := range metrics {
		if !slices.Contains(Known, m) {
			return fmt.Errorf("measure: unknown metric %q (want %s)", m, strings.Join(Known, ", "))
		}
	}
	return nil
}

// Path turns a job's clip location — a path or a file:// URI — into a path.
func Path(loc string) (string, error) {
	if p, ok := strings.CutPrefix(loc, "file://"); ok {
		if !strings.HasPrefix(p, "/") {
			return "", fmt.Errorf("measure: %q: a file:// URI needs an absolute path", loc)
		}
		return p, nil
	}
	if strings.Contains(loc, "://") {
		return "", fmt.Errorf("measure: %q: only paths and file:// URIs can be read", loc)
	}
	if loc == "" {
		return "", errors.New("measure: an empty clip location")
	}
	return loc, nil
}

// Files measures the distorted clip against the reference, both given as
// paths or file:// URIs.
func Files(ctx context.Context, reference, distorted string, metrics []string, o Options) ([]Score, error) {
	rp, err := Path(reference)
	if err != nil {
		return nil, err
	}
	dp, err := Path(distorted)
	if err != nil {
		return nil, err
	}
	rf, err := os.Open(rp)
	if err != nil {
		return nil, fmt.Errorf("measure: reference: %w", err)
	}
	defer rf.Close()
	df, err := os.Open(dp)
	if err != nil {
		return nil, fmt.Errorf("measure: distorted: %w", err)
	}
	defer df.Close()
	return Clips(ctx, rp, rf, dp, df, metrics, o)
}

// Clips measures two Y4M streams frame by frame.
func Clips(ctx context.Context, refName string, ref io.Reader, distName string, dist io.Reader, metrics []string, o Options) ([]Score, error) {
	if err := ParseMetrics(metrics); err != nil {
		return nil, err
	}
	rr, err := NewReader(refName, ref)
	if err != nil {
		return nil, err
	}
	dr, err := NewReader(distName, dist)
	if err != nil {
		return nil, err
	}
	if rr.Header.Width != dr.Header.Width || rr.Header.Height != dr.Header.Height {
		return nil, fmt.Errorf("measure: frame sizes differ: reference %s is %dx%d, distorted %s is %dx%d",
			refName, rr.Header.Width, rr.Header.Height, distName, dr.Header.Width, dr.Header.Height)
	}
	scores := make([]Score, len(metrics))
	for i, m := range metrics {
		scores[i] = Score{Metric: m, Min: math.Inf(1)}
	}
	var scratch []int
	w, h := rr.Header.Width, rr.Header.Height
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a, aerr := rr.Next()
		b, berr := dr.Next()
		switch {
		case errors.Is(aerr, io.EOF) && errors.Is(berr, io.EOF):
			for i := range scores {
				if scores[i].Frames == 0 {
					return nil, fmt.Errorf("measure: %s and %s hold no frame", refName, distName)
				}
				scores[i].Mean /= float64(scores[i].Frames)
			}
			return scores, nil
		case errors.Is(aerr, io.EOF) || errors.Is(berr, io.EOF):
			count := func(r *Reader, err error) string {
				if errors.Is(err, io.EOF) {
					return fmt.Sprintf("%d frames", r.Frames())
				}
				return fmt.Sprintf("more than %d frames", r.Frames()-1)
			}
			return nil, fmt.Errorf("measure: frame counts differ: reference %s has %s, distorted %s has %s",
				refName, count(rr, aerr), distName, count(dr, berr))
		case aerr != nil:
			return nil, aerr
		case berr != nil:
			return nil, berr
		}
		for i := range scores {
			var v float64
			if scores[i].Metric == PSNR {
				v = LumaPSNR(a, b)
			} else {
				v = LumaSSIM(a, b, w, h, &scratch)
			}
			scores[i].Mean += v
			scores[i].Min = math.Min(scores[i].Min, v)
			scores[i].Frames++
			if o.KeepPerFrame {
				scores[i].PerFrame = append(scores[i].PerFrame, v)
			}
		}
		if o.Progress != nil {
			o.Progress(rr.Frames())
		}
	}
}
