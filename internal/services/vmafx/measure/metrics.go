package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	return psnrOf(sqDiff(a, b), len(a))
}

// sqDiff is the sum of squared differences of two planes, eight samples a
// step.
func sqDiff(a, b []byte) int64 {
	b = b[:len(a)]
	var s0, s1 int64
	i := 0
	for ; i+8 <= len(a); i += 8 {
		pa, pb := a[i:i+8:i+8], b[i:i+8:i+8]
		d0, d1, d2, d3 := int64(pa[0])-int64(pb[0]), int64(pa[1])-int64(pb[1]), int64(pa[2])-int64(pb[2]), int64(pa[3])-int64(pb[3])
		d4, d5, d6, d7 := int64(pa[4])-int64(pb[4]), int64(pa[5])-int64(pb[5]), int64(pa[6])-int64(pb[6]), int64(pa[7])-int64(pb[7])
		s0 += d0*d0 + d1*d1 + d2*d2 + d3*d3
		s1 += d4*d4 + d5*d5 + d6*d6 + d7*d7
	}
	for ; i < len(a); i++ {
		d := int64(a[i]) - int64(b[i])
		s0 += d * d
	}
	return s0 + s1
}

func psnrOf(sum int64, n int) float64 {
	if sum == 0 {
		return MaxPSNR
	}
	mse := float64(sum) / float64(n)
	return math.Min(MaxPSNR, 10*math.Log10(255*255/mse))
}

// LumaSSIM is the SSIM of two luma planes of width×height, as ffmpeg's ssim
// filter computes it: sums over 4×4 blocks, combined into overlapping 8×8
// windows stepped by 4, the SSIM formula per window with C1 = (0.01·255)²
// and C2 = (0.03·255)² scaled to the window's 64 samples, averaged over the
// windows. A plane smaller than 8×8 has no window; its SSIM is 1 when equal.
//
// The block sums are integers, so the order they are added in changes
// nothing; the windows are added in the same order as ever, so every
// frame's value is the same bit for bit (TestSSIMUnchanged holds it to the
// plain loop).
func LumaSSIM(a, b []byte, width, height int, scratch *[]int) float64 {
	v, _, _ := lumaSSIMSq(a, b, width, height, scratch)
	return v
}

// LumaBoth is LumaPSNR and LumaSSIM of the same planes in one pass: the
// sum of squared differences over the whole 4×4 blocks comes from SSIM's
// own block sums (Σ(a−b)² = Σa²+Σb² − 2Σab, integers: exact), the pixels
// beyond them are added directly. Both values equal the two functions'
// bit for bit.
func LumaBoth(a, b []byte, width, height int, scratch *[]int) (psnr, ssim float64) {
	ssim, sq, ok := lumaSSIMSq(a, b, width, height, scratch)
	if !ok {
		return LumaPSNR(a, b), ssim
	}
	bw, bh := width>>2, height>>2
	if right := width - 4*bw; right > 0 {
		for y := range 4 * bh {
			sq += sqDiff(a[y*width+4*bw:(y+1)*width], b[y*width+4*bw:(y+1)*width])
		}
	}
	sq += sqDiff(a[4*bh*width:], b[4*bh*width:])
	return psnrOf(sq, len(a)), ssim
}

// lumaSSIMSq is LumaSSIM, and the sum of squared differences over the
// whole 4×4 blocks (ok false: a plane too small for a window, no sum).
func lumaSSIMSq(a, b []byte, width, height int, scratch *[]int) (float64, int64, bool) {
	bw, bh := width>>2, height>>2
	if bw < 2 || bh < 2 {
		if slices.Equal(a, b) {
			return 1, 0, false
		}
		return 0, 0, false
	}
	need := 2 * 4 * bw
	if cap(*scratch) < need {
		*scratch = make([]int, need)
	}
	sums := (*scratch)[:need]
	prev, cur := sums[:4*bw], sums[4*bw:]
	var total float64
	sq := blockRow(cur, a, b, width, bw, 0)
	for z := 1; z < bh; z++ {
		prev, cur = cur, prev
		sq += blockRow(cur, a, b, width, bw, z)
		p, c := prev[:4*bw], cur[:4*bw]
		for x := 0; x < bw-1; x++ {
			o := 4 * x
			pw, cw := p[o:o+8:o+8], c[o:o+8:o+8]
			total += window(pw[0]+pw[4]+cw[0]+cw[4], pw[1]+pw[5]+cw[1]+cw[5], pw[2]+pw[6]+cw[2]+cw[6], pw[3]+pw[7]+cw[3]+cw[7])
		}
	}
	return total / float64((bh-1)*(bw-1)), sq, true
}

// blockRow writes the sums of block row z (Σa, Σb, Σa²+Σb², Σab of each
// 4×4 block) into dst, four values a block, reading the four pixel rows
// in memory order, and returns the row's sum of squared differences.
func blockRow(dst []int, a, b []byte, width, bw, z int) int64 {
	dst = dst[:4*bw]
	clear(dst)
	for y := range 4 {
		row := (4*z + y) * width
		ra, rb := a[row:row+4*bw], b[row:row+4*bw]
		for x := 0; x < bw; x++ {
			o := 4 * x
			pa, pb, d := ra[o:o+4:o+4], rb[o:o+4:o+4], dst[o:o+4:o+4]
			p0, p1, p2, p3 := int(pa[0]), int(pa[1]), int(pa[2]), int(pa[3])
			q0, q1, q2, q3 := int(pb[0]), int(pb[1]), int(pb[2]), int(pb[3])
			d[0] += p0 + p1 + p2 + p3
			d[1] += q0 + q1 + q2 + q3
			d[2] += p0*p0 + p1*p1 + p2*p2 + p3*p3 + q0*q0 + q1*q1 + q2*q2 + q3*q3
			d[3] += p0*q0 + p1*q1 + p2*q2 + p3*q3
		}
	}
	var sq int
	for x := 0; x < bw; x++ {
		sq += dst[4*x+2] - 2*dst[4*x+3]
	}
	return int64(sq)
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
	// MaxFramePixels bounds width×height (memory holds a pair of frames,
	// 1.5 bytes a pixel each, per worker and one being read); 0 means
	// DefaultMaxFramePixels.
	MaxFramePixels int
	// MaxFrames bounds the frames of a clip; 0 means DefaultMaxFrames.
	MaxFrames int
}

// Limits a node applies by default (vmafx-node --max-frame-pixels,
// --max-frames).
const (
	// DefaultMaxFramePixels is 8K UHD with room (8192×4320): a pair of
	// frames is about 106 MB (a pair per worker, and one being read).
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
// hangs the node), and only if what was opened is a regular file with one
// link. A hard link is a regular file beneath the directory whatever it
// names — another tenant's clip, made by anyone who can write the
// directory — and no name says which link is the clip's own: a clip with
// more than one is refused (copy a clip two tenants share).
func Open(dir *os.Root, field, p string) (*os.File, error) {
	if err := CheckPath(field, p); err != nil {
		return nil, fail(ReasonClipUnavailable, "%w", err)
	}
	f, err := dir.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, Unavailable(field, p)
	}
	fi, err := f.Stat() // the kind of what was opened, not of a name
	if err != nil || !fi.Mode().IsRegular() || links(fi) != 1 {
		_ = f.Close()
		return nil, Unavailable(field, p)
	}
	return f, nil
}

// links is a file's count of hard links (1 where the system says none).
func links(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink) //nolint:unconvert // uint32 on some systems
	}
	return 1
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
	return measureFrames(ctx, rr, dr, scores, maxFrames, o)
}

// maxWorkers bounds the frames measured at once.
const maxWorkers = 4

// frame is one frame pair on its way through the pipeline.
type frame struct {
	n          int    // 1-based
	bufA, bufB []byte // whole frames, reused
	a, b       []byte // their luma planes
	vals       [2]float64
}

// measureFrames reads the two clips' frames in order and measures them on
// every core (up to maxWorkers), one frame pair per worker; each frame's
// values are computed by the same code as one after the other would, and
// added into the scores in frame order — the figures are the same bit for
// bit as measured on one core. Memory holds workers+1 frame pairs.
func measureFrames(ctx context.Context, rr, dr *Reader, scores []Score, maxFrames int, o Options) ([]Score, error) {
	workers := max(1, min(runtime.GOMAXPROCS(0), maxWorkers))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan *frame, workers+1)
	for range workers + 1 {
		free <- &frame{}
	}
	jobs := make(chan *frame, workers+1)
	done := make(chan *frame, workers+1)
	var wg sync.WaitGroup
	w, h := rr.Header.Width, rr.Header.Height
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var scratch []int
			for f := range jobs {
				if len(scores) == 2 {
					// Both metrics, in one pass.
					psnr, ssim := LumaBoth(f.a, f.b, w, h, &scratch)
					for i := range scores {
						f.vals[i] = ssim
						if scores[i].Metric == PSNR {
							f.vals[i] = psnr
						}
					}
				} else if scores[0].Metric == PSNR {
					f.vals[0] = LumaPSNR(f.a, f.b)
				} else {
					f.vals[0] = LumaSSIM(f.a, f.b, w, h, &scratch)
				}
				done <- f
			}
		}()
	}
	// The reader: frames in order, until both clips end, one fails, or the
	// measurement stops. Its last word is readErr and total.
	var (
		readErr error
		total   int
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(jobs)
		for {
			if readErr = ctx.Err(); readErr != nil {
				return
			}
			var f *frame
			select {
			case f = <-free:
			case <-ctx.Done():
				readErr = ctx.Err()
				return
			}
			if f.bufA == nil {
				f.bufA, f.bufB = make([]byte, rr.FrameSize()), make([]byte, dr.FrameSize())
			}
			a, aerr := rr.NextInto(f.bufA)
			b, berr := dr.NextInto(f.bufB)
			switch {
			case errors.Is(aerr, io.EOF) && errors.Is(berr, io.EOF):
				total = rr.Frames()
				return
			case errors.Is(aerr, io.EOF) || errors.Is(berr, io.EOF):
				count := func(r *Reader, err error) string {
					if errors.Is(err, io.EOF) {
						return fmt.Sprintf("%d frames", r.Frames())
					}
					return fmt.Sprintf("more than %d frames", r.Frames()-1)
				}
				readErr = fail(ReasonClipsDiffer, "measure: frame counts differ: reference %s has %s, distorted %s has %s",
					rr.name, count(rr, aerr), dr.name, count(dr, berr))
				return
			case aerr != nil:
				readErr = aerr
				return
			case berr != nil:
				readErr = berr
				return
			case rr.Frames() > maxFrames:
				readErr = fail(ReasonTooManyFrames, "measure: %s: more than %d frames (--max-frames)", rr.name, maxFrames)
				return
			}
			f.n, f.a, f.b = rr.Frames(), a, b
			jobs <- f
		}
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
	// The collector: each frame's values into the scores, in frame order.
	pending := map[int]*frame{}
	next := 1
	for f := range done {
		pending[f.n] = f
		for {
			g, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			for i := range scores {
				v := g.vals[i]
				scores[i].Mean += v
				scores[i].Min = math.Min(scores[i].Min, v)
				scores[i].Frames++
				if o.KeepPerFrame {
					scores[i].PerFrame = append(scores[i].PerFrame, v)
				}
			}
			if o.Progress != nil {
				o.Progress(next)
			}
			next++
			free <- g
		}
	}
	<-readDone
	if readErr != nil {
		return nil, readErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range scores {
		if scores[i].Frames == 0 || total == 0 {
			return nil, fmt.Errorf("measure: %s and %s hold no frame", rr.name, dr.name)
		}
		scores[i].Mean /= float64(scores[i].Frames)
	}
	return scores, nil
}
