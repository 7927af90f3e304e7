package serve

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ListenTCP listens on addr; flag names the flag for the error.
func ListenTCP(flag, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve: %s %s: %w", flag, addr, err)
	}
	return lis, nil
}

// ListenUnix listens on a Unix socket at path with the given mode, creating
// its directory. Only a stale socket at path is removed first: one that
// refuses connections (its server died). A path holding anything else is
// refused, naming it — a regular file is not ours to delete, and a socket
// that still answers belongs to a live process whose clients would lose it.
func ListenUnix(flag, path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("serve: %s: %w", flag, err)
	}
	if err := removeStaleSocket(flag, path); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", flag, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("serve: %s: %w", flag, err)
	}
	return lis, nil
}

func removeStaleSocket(flag, path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve: %s %s: %w", flag, path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("serve: %s %s exists and is not a socket (%s); refusing to remove it: choose another path or remove it yourself", flag, path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("serve: %s %s: another process is listening on it (it accepted a connection); refusing to take it over: stop that process first", flag, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("serve: %s %s: cannot tell whether the socket is stale: %w", flag, path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("serve: %s %s: removing a stale socket: %w", flag, path, err)
	}
	return nil
}
