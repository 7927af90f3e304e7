package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialContext dials addr from inside the cluster's network namespace, as a
// process on the node would: Service cluster IPs (through kube-proxy's
// rules) and pod IPs are reachable, as nowhere else on the machine. The
// socket is made in the namespace and keeps it; the dialing goroutine's
// thread goes back to ours.
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// A thread whose namespace could not be restored is left locked,
		// so that the runtime ends it with the goroutine.
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer own.Close()
		ns, err := os.Open(c.NetNS)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("cluster: entering the namespace: %w", err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}
