package measure_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
	"github.com/callerauth/callerauth/internal/services/vmafx/measure"
)

func clip(t testing.TB, dir, name string, s clipgen.Spec) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := clipgen.WriteFile(p, s); err != nil {
		t.Fatal(err)
	}
	return p
}

// ffmpegStats runs ffmpeg's filter on distorted (main) against reference
// and returns the per-frame value of key from its stats file.
func ffmpegStats(t *testing.T, filter, key, reference, distorted string) []float64 {
	t.Helper()
	bin, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatal("ffmpeg is the reference for these figures and is not installed: make test installs it (apt-get install ffmpeg)")
	}
	stats := filepath.Join(t.TempDir(), filter+".log")
	cmd := exec.Command(bin, "-hide_banner", "-loglevel", "error", "-i", distorted, "-i", reference,
		"-lavfi", fmt.Sprintf("[0:v][1:v]%s=stats_file=%s", filter, stats), "-f", "null", "-")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %s: %v\n%s", filter, err, out)
	}
	f, err := os.Open(stats)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vals []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, field := range strings.Fields(sc.Text()) {
			if v, ok := strings.CutPrefix(field, key+":"); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("ffmpeg's %s: %q", key, field)
				}
				vals = append(vals, x)
			}
		}
	}
	return vals
}

// TestAgainstFFmpeg: the node's luma PSNR and SSIM agree with ffmpeg's psnr
// and ssim filters frame by frame, and so in mean and minimum, to 0.01 dB
// and 0.001, on generated clips of several sizes and noise levels.
func TestAgainstFFmpeg(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		w, h, frames, noise int
	}{
		{64, 48, 6, 3},
		{176, 144, 10, 12},
		{99, 67, 5, 30}, // odd sizes: chroma rounds up, SSIM's blocks leave an edge
	} {
		t.Run(fmt.Sprintf("%dx%d-noise%d", tt.w, tt.h, tt.noise), func(t *testing.T) {
			ref := clip(t, dir, fmt.Sprintf("ref-%dx%d.y4m", tt.w, tt.h), clipgen.Spec{Width: tt.w, Height: tt.h, Frames: tt.frames})
			dist := clip(t, dir, fmt.Sprintf("dist-%dx%d-%d.y4m", tt.w, tt.h, tt.noise), clipgen.Spec{Width: tt.w, Height: tt.h, Frames: tt.frames, Noise: tt.noise, Seed: 7})
			scores, err := files(t, dir, ref, dist, []string{measure.PSNR, measure.SSIM}, measure.Options{KeepPerFrame: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				score     measure.Score
				filter    string
				key       string
				tolerance float64
			}{
				{scores[0], "psnr", "psnr_y", 0.01},
				{scores[1], "ssim", "Y", 0.001},
			} {
				want := ffmpegStats(t, c.filter, c.key, ref, dist)
				if len(want) != tt.frames || int(c.score.Frames) != tt.frames {
					t.Fatalf("%s: ffmpeg gave %d frames, we %d; want %d", c.filter, len(want), c.score.Frames, tt.frames)
				}
				mean, lo := 0.0, math.Inf(1)
				for i, w := range want {
					if math.Abs(c.score.PerFrame[i]-w) > c.tolerance {
						t.Errorf("%s frame %d: %.6f, ffmpeg %.6f", c.filter, i+1, c.score.PerFrame[i], w)
					}
					mean += w / float64(len(want))
					lo = math.Min(lo, w)
				}
				if math.Abs(c.score.Mean-mean) > c.tolerance || math.Abs(c.score.Min-lo) > c.tolerance {
					t.Errorf("%s: mean %.6f min %.6f, ffmpeg's frames give %.6f and %.6f", c.filter, c.score.Mean, c.score.Min, mean, lo)
				}
			}
		})
	}
}

func TestIdenticalClips(t *testing.T) {
	dir := t.TempDir()
	ref := clip(t, dir, "ref.y4m", clipgen.Spec{Width: 32, Height: 32, Frames: 3})
	scores, err := files(t, dir, ref, ref, []string{measure.SSIM, measure.PSNR}, measure.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if scores[0].Mean != 1 || scores[0].Min != 1 || scores[1].Mean != measure.MaxPSNR || scores[1].Frames != 3 {
		t.Fatalf("%+v", scores)
	}
}

// files measures two clips of dir (paths in it, named relative to it).
func files(t testing.TB, dir, ref, dist string, metrics []string, o measure.Options) ([]measure.Score, error) {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	rel := func(p string) string {
		if r, err := filepath.Rel(dir, p); err == nil && filepath.IsAbs(p) {
			return r
		}
		return p
	}
	return measure.Files(context.Background(), root, rel(ref), rel(dist), metrics, o)
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	ref := clip(t, dir, "ref.y4m", clipgen.Spec{Width: 32, Height: 32, Frames: 3})
	wider := clip(t, dir, "wider.y4m", clipgen.Spec{Width: 48, Height: 32, Frames: 3})
	longer := clip(t, dir, "longer.y4m", clipgen.Spec{Width: 32, Height: 32, Frames: 4})
	notY4M := filepath.Join(dir, "text.y4m")
	_ = os.WriteFile(notY4M, []byte("hello\n"), 0o600)
	deep := filepath.Join(dir, "deep.y4m")
	_ = os.WriteFile(deep, []byte("YUV4MPEG2 W8 H8 C420p10\n"), 0o600)
	huge := filepath.Join(dir, "huge.y4m")
	_ = os.WriteFile(huge, []byte("YUV4MPEG2 W16384 H16384\nFRAME\n"), 0o600)
	var truncated bytes.Buffer
	_ = clipgen.Write(&truncated, clipgen.Spec{Width: 32, Height: 32, Frames: 3})
	cut := filepath.Join(dir, "cut.y4m")
	_ = os.WriteFile(cut, truncated.Bytes()[:truncated.Len()-100], 0o600)
	for _, tt := range []struct {
		name, ref, dist string
		metrics         []string
		o               measure.Options
		want, reason    string
	}{
		{"sizes differ", ref, wider, []string{"psnr"}, measure.Options{}, "frame sizes differ: reference ref.y4m is 32x32, distorted wider.y4m is 48x32", measure.ReasonClipsDiffer},
		{"frame counts differ", ref, longer, []string{"psnr"}, measure.Options{}, "frame counts differ: reference ref.y4m has 3 frames, distorted longer.y4m has more than 3 frames", measure.ReasonClipsDiffer},
		{"frame counts differ the other way", longer, ref, []string{"psnr"}, measure.Options{}, "distorted ref.y4m has 3 frames", measure.ReasonClipsDiffer},
		{"unknown metric", ref, ref, []string{"psnr", "vmaf"}, measure.Options{}, `spec.metrics[1]: unknown metric "vmaf" (want psnr, ssim)`, measure.ReasonClipInvalid},
		{"a metric twice", ref, ref, []string{"ssim", "ssim"}, measure.Options{}, `spec.metrics[1]: "ssim" is listed twice`, measure.ReasonClipInvalid},
		{"not Y4M", ref, notY4M, []string{"psnr"}, measure.Options{}, "not a YUV4MPEG2 stream", measure.ReasonClipInvalid},
		{"10-bit", ref, deep, []string{"psnr"}, measure.Options{}, "colorspace C420p10; this node measures 8-bit 4:2:0 only", measure.ReasonClipInvalid},
		{"truncated", ref, cut, []string{"psnr"}, measure.Options{}, "frame 3 is truncated", measure.ReasonClipInvalid},
		// 16384x16384 is refused on its header, before a frame is allocated.
		{"frames too large", huge, huge, []string{"psnr"}, measure.Options{}, "frames of 16384x16384 are 268435456 pixels; this node measures at most 35389440", measure.ReasonFrameTooLarge},
		{"frames over a lower limit", ref, ref, []string{"psnr"}, measure.Options{MaxFramePixels: 32*32 - 1}, "at most 1023", measure.ReasonFrameTooLarge},
		{"too many frames", longer, longer, []string{"psnr"}, measure.Options{MaxFrames: 3}, "more than 3 frames (--max-frames)", measure.ReasonTooManyFrames},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := files(t, dir, tt.ref, tt.dist, tt.metrics, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) || measure.ReasonOf(err) != tt.reason {
				t.Fatalf("err = %v (reason %s); want %q, reason %s", err, measure.ReasonOf(err), tt.want, tt.reason)
			}
		})
	}
}

// TestClipsConfinedToTheTenant: a clip is opened beneath the tenant's clip
// directory only, without blocking, only if it is a regular file with one
// link (a hard link may name another tenant's clip); whatever
// the cause, the submitter reads one sentence (no file-system oracle).
func TestClipsConfinedToTheTenant(t *testing.T) {
	root := t.TempDir()
	mine, theirs := filepath.Join(root, "tenant-a"), filepath.Join(root, "tenant-b")
	for _, d := range []string{mine, theirs, filepath.Join(mine, "sub")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	clip(t, mine, "ref.y4m", clipgen.Spec{Width: 32, Height: 32, Frames: 3})
	clip(t, theirs, "secret.y4m", clipgen.Spec{Width: 32, Height: 32, Frames: 3})
	if err := syscall.Mkfifo(filepath.Join(mine, "fifo.y4m"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Symlink("../tenant-b/secret.y4m", filepath.Join(mine, "escape.y4m"))
	_ = os.Symlink(filepath.Join(theirs, "secret.y4m"), filepath.Join(mine, "absolute-link.y4m"))
	_ = os.Symlink("ref.y4m", filepath.Join(mine, "inside-link.y4m"))
	// A hard link is a regular file beneath the directory, whoever's
	// clip it is: one made in tenant-a's directory to tenant-b's clip
	// was read on ae46db4. Every clip with more than one link is refused.
	if err := os.Link(filepath.Join(theirs, "secret.y4m"), filepath.Join(mine, "hard-link.y4m")); err != nil {
		t.Fatal(err)
	}
	want := func(p string) string {
		return "spec.distorted " + strconv.Quote(p) + ": no such clip in the tenant's clip directory (missing, not a regular file, or not beneath it)"
	}
	for _, p := range []string{"fifo.y4m", "sub", "none.y4m", "escape.y4m", "absolute-link.y4m", "../tenant-b/secret.y4m", "sub/../../tenant-b/secret.y4m", "hard-link.y4m"} {
		t.Run(p, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := files(t, mine, "ref.y4m", p, []string{"psnr"}, measure.Options{}); done <- err }()
			select {
			case err := <-done:
				if err == nil || measure.ReasonOf(err) != measure.ReasonClipUnavailable || (!strings.Contains(err.Error(), "..") && err.Error() != want(p)) {
					t.Fatalf("err = %v (reason %s); want %q", err, measure.ReasonOf(err), want(p))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("opening the clip blocked")
			}
		})
	}
	// The absolute path of another tenant's clip is refused before any open.
	dir, err := os.OpenRoot(mine)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if _, err := measure.Files(context.Background(), dir, "ref.y4m", filepath.Join(theirs, "secret.y4m"), []string{"psnr"}, measure.Options{}); err == nil || !strings.Contains(err.Error(), "an absolute path") {
		t.Fatalf("absolute: %v", err)
	}
	// A link that stays beneath the directory is followed.
	if _, err := files(t, mine, "ref.y4m", "inside-link.y4m", []string{"psnr"}, measure.Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestCheckPath(t *testing.T) {
	for p, want := range map[string]string{
		"a/b.y4m":                 "",
		"":                        "is required",
		"/etc/passwd":             "an absolute path",
		"a/../b.y4m":              `a ".." element`,
		"..":                      `a ".." element`,
		"a//b":                    "an empty",
		"./a":                     "an empty",
		"file:///clips/a.y4m":     "a URL",
		"s3://bucket/a.y4m":       "a URL",
		"a\x00b":                  "NUL",
		strings.Repeat("a", 1025): "1025 bytes; at most 1024",
		strings.Repeat("a", 1024): "",
	} {
		err := measure.CheckPath("spec.reference", p)
		if (want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "spec.reference"))) {
			t.Errorf("%.40q: %v; want %q", p, err, want)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("%.40q: the error repeats the input: %d bytes", p, len(err.Error()))
		}
	}
}

// BenchmarkMeasure streams a 640x360, 25-frame pair through both metrics.
func BenchmarkMeasure(b *testing.B) {
	dir := b.TempDir()
	ref := clip(b, dir, "ref.y4m", clipgen.Spec{Width: 640, Height: 360, Frames: 25})
	dist := clip(b, dir, "dist.y4m", clipgen.Spec{Width: 640, Height: 360, Frames: 25, Noise: 8, Seed: 1})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := files(b, dir, ref, dist, []string{measure.PSNR, measure.SSIM}, measure.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
