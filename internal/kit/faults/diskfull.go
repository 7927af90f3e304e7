package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DiskFull makes every open file of this process under dir a full disk:
// each descriptor is replaced (dup2) by one of /dev/full, so that the
// next write to it fails with ENOSPC, as on a volume that filled. It
// returns how many it replaced.
func DiskFull(dir string) (int, error) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = full.Close() }()
	dir, err = filepath.EvalSymlinks(dir)
	if err != nil {
		return 0, err
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			continue
		}
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil {
			continue
		}
		if err := syscall.Dup2(int(full.Fd()), fd); err != nil {
			return n, fmt.Errorf("replacing %s: %w", target, err)
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no open file under %s", dir)
	}
	return n, nil
}
