// Command pause is the sandbox container of the test cluster's pods, in
// the part of Kubernetes' pause: it holds the pod's namespaces, reaps the
// children it inherits, and exits on SIGINT or SIGTERM. The cluster the
// tests start has no registry to pull the usual one from, so it builds
// this one and loads it into containerd (internal/kit/cluster).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
