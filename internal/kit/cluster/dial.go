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
// rules) and pod IPs are reachable, as nowhere else on the machine.
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := c.inNetNS(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Listen listens on addr inside the cluster's network namespace (an
// address of the node, c.Address say): pods reach it, the machine only
// through the veth pair.
func (c *Cluster) Listen(network, addr string) (net.Listener, error) {
	var lis net.Listener
	err := c.inNetNS(func() error {
		var err error
		lis, err = net.Listen(network, addr)
		return err
	})
	return lis, err
}

// inNetNS runs f on a thread of its own in the cluster's network
// namespace: a socket f makes is made there and keeps it. The thread goes
// back to ours afterwards, or, if it cannot, is ended with its goroutine.
func (c *Cluster) inNetNS(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- err
			return
		}
		defer own.Close()
		ns, err := os.Open(c.NetNS)
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("cluster: entering the namespace: %w", err)
			return
		}
		err = f()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}
