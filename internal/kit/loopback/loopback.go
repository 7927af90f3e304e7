// Package loopback picks free ports on 127.0.0.1 and dials TLS gRPC
// servers there with a token sent as is ([DialTLS]), for the tests, the
// demo and the benchmarks that must pass an address to a process that
// cannot listen on port 0 and report what it bound (etcd, Hydra,
// PostgreSQL, the peers of the benchmark comparison).
package loopback

import (
	"fmt"
	"net"
)

// Ports returns n distinct ports of 127.0.0.1 that were free a moment ago
// (all held at once while picked, so never the same twice). A process
// started on one may still lose it to another: start a process on port 0
// instead whenever it can report the address it bound.
func Ports(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("loopback: %w", err)
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Addr is "127.0.0.1:<port>" of one free port ([Ports]).
func Addr() (string, error) {
	p, err := Ports(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p[0]), nil
}
