package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
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
	// MaxFramePixels bounds width×height (memory holds two frames of 1.5
	// bytes a pixel); 0 means DefaultMaxFramePixels.
	MaxFramePixels int
	// MaxFrames bounds the frames of a clip; 0 means DefaultMaxFrames.
	MaxFrames int
}

// Limits a node applies by default (vmafx-node --max-frame-pixels,
// --max-frames).
const (
	// DefaultMaxFramePixels is 8K UHD with room (8192×4320): two frames
	// are about 106 MB.
	DefaultMaxFramePixels = 8192 * 4320
	// DefaultMaxFrames is a little over an hour at 60 frames a second.
	DefaultMaxFrames = 250_000
	// MaxPathBytes bounds a clip path.
	MaxPathBytes = 1024
)

// Stable reasons of a measurement that fails (the job's reason).
const (
	// ReasonClipUnavailable: a clip is missing, not a regular file or
	// outside the tenant's clip directory — one sentence for all three,
	// so that a submitter learns nothing of files it may not open.
	ReasonClipUnavailable = "clip_unavailable"
	// ReasonClipInvalid: not a Y4M 8-bit 4:2:0 stream, or a damaged one.
	ReasonClipInvalid = "clip_invalid"
	// ReasonFrameTooLarge: width×height over the node's limit.
	ReasonFrameTooLarge = "frame_too_large"
	// ReasonTooManyFrames: more frames than the node's limit.
	ReasonTooManyFrames = "too_many_frames"
	// ReasonClipsDiffer: the two clips differ in frame size or count.
	ReasonClipsDiffer = "clips_differ"
)

// Error is a measurement failure with its stable reason.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ReasonOf is the stable reason of a measurement error ("" for none,
// clip_invalid for an error without one).
func ReasonOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonClipInvalid
}

// ParseMetrics checks the metrics asked for: at least one, each known, each
// once. Errors name the field spec.metrics and the index.
func ParseMetrics(metrics []string) error {
	if len(metrics) == 0 {
		return fmt.Errorf("spec.metrics: none asked for (want %s, each at most once)", strings.Join(Known, ", "))
	}
	if len(metrics) > len(Known) {
		return fmt.Errorf("spec.metrics: %d listed; at most %d (%s, each at most once)", len(metrics), len(Known), strings.Join(Known, ", "))
	}
	for i, m := range metrics {
		if !slices.Contains(Known, m) {
			return fmt.Errorf("spec.metrics[%d]: unknown metric %s (want %s)", i, quote(m), strings.Join(Known, ", "))
		}
		if slices.Contains(metrics[:i], m) {
			return fmt.Errorf("spec.metrics[%d]: %q is listed twice", i, m)
		}
	}
	return nil
}

// quote quotes s for an error message, cut to 64 bytes: an error never
// repeats a large input.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// CheckPath checks a clip's name as a job spec gives it (field names it in
// errors): a path relative to the tenant's clip directory, at most
// MaxPathBytes, UTF-8, with no empty, "." or ".." element, no NUL and no
// backslash. The node checks it again and opens it beneath that directory
// only.
func CheckPath(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is required: a clip path relative to the tenant's clip directory", field)
	case len(p) > MaxPathBytes:
		return fmt.Errorf("%s: %d bytes; at most %d", field, len(p), MaxPathBytes)
	case !utf8.ValidString(p) || strings.ContainsAny(p, "\x00\\"):
		return fmt.Errorf("%s: not a clip path (UTF-8 without NUL or backslash)", field)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%s: an absolute path; clips are named relative to the tenant's clip directory", field)
	case strings.Contains(p, "://"):
		return fmt.Errorf("%s: a URL; clips are named by a path relative to the tenant's clip directory", field)
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return fmt.Errorf("%s: a \"..\" element; clips are named beneath the tenant's clip directory", field)
		}
		if e == "" || e == "." {
			return fmt.Errorf("%s: an empty or \".\" element; name each clip by one clean relative path", field)
		}
	}
	return nil
}

// Unavailable is the one sentence a submitter sees about a clip the node
// cannot open, whatever the cause (reason clip_unavailable).
func Unavailable(field, p string) error {
	return fail(ReasonClipUnavailable, "%s %s: no such clip in the tenant's clip directory (missing, not a regular file, or not beneath it)", field, quote(p))
}

// Open opens a clip beneath dir (the tenant's clip directory): never
// following anything out of it, without blocking (a FIFO or a device never
// hangs the node), and only if what was opened is a regular file.
func Open(dir *os.Root, field, p string) (*os.File, error) {
	if err := CheckPath(field, p); err != nil {
		return nil, fail(ReasonClipUnavailable, "%w", err)
	}
	f, err := dir.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, Unavailable(field, p)
	}
	fi, err := f.Stat() // the kind of what was opened, not of a name
	if err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, Unavailable(field, p)
	}
	return f, nil
}

// Files measures the distorted clip against the reference, both named
// relative to dir, the tenant's clip directory.
func Files(ctx context.Context, dir *os.Root, reference, distorted string, metrics []string, o Options) ([]Score, error) {
	rf, err := Open(dir, "spec.reference", reference)
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	df, err := Open(dir, "spec.distorted", distorted)
	if err != nil {
		return nil, err
	}
	defer df.Close()
	return Clips(ctx, reference, rf, distorted, df, metrics, o)
}

// Clips measures two Y4M streams frame by frame.
func Clips(ctx context.Context, refName string, ref io.Reader, distName string, dist io.Reader, metrics []string, o Options) ([]Score, error) {
	if err := ParseMetrics(metrics); err != nil {
		return nil, err
	}
	maxPixels, maxFrames := o.MaxFramePixels, o.MaxFrames
	if maxPixels <= 0 {
		maxPixels = DefaultMaxFramePixels
	}
	if maxFrames <= 0 {
		maxFrames = DefaultMaxFrames
	}
	rr, err := NewReader(refName, ref)
	if err != nil {
		return nil, err
	}
	dr, err := NewReader(distName, dist)
	if err != nil {
		return nil, err
	}
	for _, r := range []*Reader{rr, dr} {
		if px := r.Header.Width * r.Header.Height; px > maxPixels {
			return nil, fail(ReasonFrameTooLarge, "measure: %s: frames of %dx%d are %d pixels; this node measures at most %d (--max-frame-pixels)",
				r.name, r.Header.Width, r.Header.Height, px, maxPixels)
		}
	}
	if rr.Header.Width != dr.Header.Width || rr.Header.Height != dr.Header.Height {
		return nil, fail(ReasonClipsDiffer, "measure: frame sizes differ: reference %s is %dx%d, distorted %s is %dx%d",
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
			return nil, fail(ReasonClipsDiffer, "measure: frame counts differ: reference %s has %s, distorted %s has %s",
				refName, count(rr, aerr), distName, count(dr, berr))
		case aerr != nil:
			return nil, aerr
		case berr != nil:
			return nil, berr
		case rr.Frames() > maxFrames:
			return nil, fail(ReasonTooManyFrames, "measure: %s: more than %d frames (--max-frames)", refName, maxFrames)
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
