package connector

import (
	"net"
	"syscall"
)

// peerOf asks the kernel which process is at the other end of c
// (SO_PEERCRED).
func peerOf(c *net.UnixConn) (pid, uid uint32, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if credErr != nil {
		return 0, 0, credErr
	}
	return uint32(cred.Pid), cred.Uid, nil //nolint:gosec // a PID is positive.
}
