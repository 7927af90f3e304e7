package benchcompare

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
	"github.com/callerauth/callerauth/internal/services/vmafx/measure"
)

// NodeTarget is the vmafx node's goal beside ffmpeg: at least its speed.
const NodeTarget = 1.0

// NodeVsFFmpeg is the vmafx node's own job beside the real ffmpeg: luma
// PSNR and SSIM of a width×height pair of frames (the reference and a
// copy with noise of 8 levels, written into dir), by the node's
// measurement code (measure.Files, every core it has) and by ffmpeg
// (extractplanes=y, then its psnr and ssim filters, -f null), each rounds
// times in turn, as frames a second; each figure its fastest round.
func NodeVsFFmpeg(ctx context.Context, dir, ffmpeg string, width, height, frames, rounds int) (Row, error) {
	ref, dist := filepath.Join(dir, "ref.y4m"), filepath.Join(dir, "dist.y4m")
	if err := clipgen.WriteFile(ref, clipgen.Spec{Width: width, Height: height, Frames: frames}); err != nil {
		return Row{}, err
	}
	if err := clipgen.WriteFile(dist, clipgen.Spec{Width: width, Height: height, Frames: frames, Noise: 8, Seed: 1}); err != nil {
		return Row{}, err
	}
	defer func() { _ = os.Remove(ref); _ = os.Remove(dist) }()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Row{}, err
	}
	defer root.Close()
	node := func() (time.Duration, error) {
		start := time.Now()
		scores, err := measure.Files(ctx, root, "ref.y4m", "dist.y4m", []string{measure.PSNR, measure.SSIM}, measure.Options{})
		if err == nil && scores[0].Frames != int64(frames) {
			err = fmt.Errorf("the node measured %d frames of %d", scores[0].Frames, frames)
		}
		return time.Since(start), err
	}
	ff := func() (time.Duration, error) {
		start := time.Now()
		cmd := exec.CommandContext(ctx, ffmpeg, "-hide_banner", "-loglevel", "error", "-i", dist, "-i", ref, //nolint:gosec // the ffmpeg the operator named, on files written here.
			"-lavfi", "[0:v]extractplanes=y,split[d1][d2];[1:v]extractplanes=y,split[r1][r2];[d1][r1]psnr;[d2][r2]ssim", "-f", "null", "-")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("ffmpeg: %w\n%s", err, out)
		}
		return time.Since(start), nil
	}
	best := [2]time.Duration{}
	var took [2][]time.Duration // each round's
	for round := range max(1, rounds) {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, who := range order {
			run := node
			if who == 1 {
				run = ff
			}
			d, err := run()
			if err != nil {
				return Row{}, err
			}
			took[who] = append(took[who], d)
			if best[who] == 0 || d < best[who] {
				best[who] = d
			}
		}
	}
	fps := func(d time.Duration) float64 { return float64(frames) / d.Seconds() }
	return spread(Row{
		Name:       fmt.Sprintf("vmafx node vs ffmpeg: luma PSNR + SSIM of a %dx%d pair, %d frames (frames/s)", width, height, frames),
		Ours:       fmt.Sprintf("%.0f frames/s", fps(best[0])),
		Base:       fmt.Sprintf("%.0f frames/s", fps(best[1])),
		Ratio:      fps(best[0]) / fps(best[1]),
		Throughput: true,
		Target:     NodeTarget,
	}, len(took[0]), func(i int) float64 { return fps(took[0][i]) / fps(took[1][i]) }), nil
}
