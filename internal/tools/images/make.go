package images

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Make runs the images command (make images) of the repository at
// root into out, tagged as the charts name them (ghcr.io/callerauth/NAME:
// 0.1.0), in a process of its own — not a test binary built with -race,
// where compressing the layers takes minutes — and returns what it built.
func Make(root, out string) ([]Image, error) {
	// -buildvcs=false: a working tree with uncommitted changes would tag
	// its images 0.1.0-dirty (not the release the charts name), which is
	// right for make images and beside the point here.
	cmd := exec.Command("go", "run", "./cmd/images", "--root", ".", "--out", out, "--registry", "ghcr.io/callerauth", "--tag", "0.1.0", "--buildvcs=false") //nolint:gosec // the caller's output directory
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("make images: %w\n%s", err, stderr.String())
	}
	var imgs []Image
	for _, line := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
		ref, digest, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("make images printed %q", line)
		}
		name := ref[strings.LastIndex(ref, "/")+1 : strings.LastIndex(ref, ":")]
		imgs = append(imgs, Image{Name: name, Ref: ref, Digest: digest, Layout: filepath.Join(out, name),
			Tarballs: []string{filepath.Join(out, name+".tar")}, SBOM: filepath.Join(out, name+".spdx.json"), Platforms: []string{"linux/" + runtime.GOARCH}})
	}
	return imgs, nil
}
