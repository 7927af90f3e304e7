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
	"testing"

	"github.com/callerauth/callerauth/internal/vmafx/clipgen"
	"github.com/callerauth/callerauth/internal/vmafx/measure"
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
			scores, err := measure.Files(context.Background(), ref, "file://"+dist, []string{measure.PSNR, measure.SSIM}, measure.Options{KeepPerFrame: true})
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
	scores, err := measure.Files(context.Background(), ref, ref, []string{measure.SSIM, measure.PSNR}, measure.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if scores[0].Mean != 1 || scores[0].Min != 1 || scores[1].Mean != measure.MaxPSNR || scores[1].Frames != 3 {
		t.Fatalf("%+v", scores)
	}
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
	var truncated bytes.Buffer
	_ = clipgen.Write(&truncated, clipgen.Spec{Width: 32, Height: 32, Frames: 3})
	cut := filepath.Join(dir, "cut.y4m")
	_ = os.WriteFile(cut, truncated.Bytes()[:truncated.Len()-100], 0o600)
	for _, tt := range []struct {
		name, ref, dist string
		metrics         []string
		want            string
	}{
		{"sizes differ", ref, wider, []string{"psnr"}, "frame sizes differ: reference " + ref + " is 32x32, distorted " + wider + " is 48x32"},
		{"frame counts differ", ref, longer, []string{"psnr"}, "frame counts differ: reference " + ref + " has 3 frames, distorted " + longer + " has more than 3 frames"},
		{"frame counts differ the other way", longer, ref, []string{"psnr"}, "distorted " + ref + " has 3 frames"},
		{"unknown metric", ref, ref, []string{"psnr", "vmaf"}, `unknown metric "vmaf" (want psnr, ssim)`},
		{"not Y4M", ref, notY4M, []string{"psnr"}, "not a YUV4MPEG2 stream"},
		{"10-bit", ref, deep, []string{"psnr"}, "colorspace C420p10; this node measures 8-bit 4:2:0 only"},
		{"truncated", ref, cut, []string{"psnr"}, "frame 3 is truncated"},
		{"missing file", ref, filepath.Join(dir, "none.y4m"), []string{"psnr"}, "no such file"},
		{"a URL", ref, "https://example.com/clip.y4m", []string{"psnr"}, "only paths and file:// URIs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := measure.Files(context.Background(), tt.ref, tt.dist, tt.metrics, measure.Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
}

// BenchmarkMeasure streams a 640x360, 25-frame pair through both metrics.
func BenchmarkMeasure(b *testing.B) {
	dir := b.TempDir()
	ref := clip(b, dir, "ref.y4m", clipgen.Spec{Width: 640, Height: 360, Frames: 25})
	dist := clip(b, dir, "dist.y4m", clipgen.Spec{Width: 640, Height: 360, Frames: 25, Noise: 8, Seed: 1})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := measure.Files(context.Background(), ref, dist, []string{measure.PSNR, measure.SSIM}, measure.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
