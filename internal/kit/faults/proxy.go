package faults

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections — TCP from a loopback port, or from a Unix
// socket — to a target until it is cut: Cut closes every open connection
// and refuses new ones (each is closed as soon as it is accepted) until
// Mend. It breaks a long-lived connection — a watch — the way a network
// partition or a restarted server does. Refuse is a harder cut: the port
// closes, so that dials are refused; HoldReplies a silent one: nothing
// comes back.
type Proxy struct {
	network string // of the target: "tcp" or "unix"
	addr    string

	mu      sync.Mutex
	lis     net.Listener
	refused bool // the listener is closed until Mend
	target  string
	cut     bool
	conns   map[net.Conn]struct{}
	// hold swallows what the target sends back (HoldReplies).
	hold atomic.Bool
}

// HoldReplies makes the proxy swallow what the target sends back, on open
// connections and new ones, until released: a request reaches the server
// and is acted on, its answer never reaches the client. Cut then breaks
// the connection — the answer lost after the commit.
func (p *Proxy) HoldReplies(hold bool) { p.hold.Store(hold) }

// heldWriter writes through to the client unless the replies are held.
type heldWriter struct {
	c    net.Conn
	hold *atomic.Bool
}

func (w heldWriter) Write(b []byte) (int, error) {
	if w.hold.Load() {
		return len(b), nil
	}
	return w.c.Write(b)
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port).
func NewProxy(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return newProxy(lis, "tcp", target), nil
}

// NewUnixProxy listens on the Unix socket path and forwards to the Unix
// socket target: a proxy in front of a node-local service.
func NewUnixProxy(path, target string) (*Proxy, error) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	return newProxy(lis, "unix", target), nil
}

func newProxy(lis net.Listener, network, target string) *Proxy {
	p := &Proxy{lis: lis, addr: lis.Addr().String(), network: network, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept(lis)
	return p
}

// Addr is the proxy's host:port, or its socket's path.
func (p *Proxy) Addr() string { return p.addr }

// Retarget forwards new connections to target: a server restarted on
// another port stays behind the same address.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Cut closes the open connections and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Refuse closes the open connections and the listening port itself, so
// that a dial is refused (ECONNREFUSED), until Mend listens again on the
// same address.
func (p *Proxy) Refuse() {
	p.Cut()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refused {
		p.refused = true
		_ = p.lis.Close()
	}
}

// Mend forwards new connections again (listening again after Refuse).
func (p *Proxy) Mend() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refused {
		lis, err := net.Listen(p.lis.Addr().Network(), p.addr)
		if err != nil {
			return err
		}
		p.lis, p.refused = lis, false
		go p.accept(lis)
	}
	p.cut = false
	return nil
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	_ = p.lis.Close()
	p.refused = true
	p.mu.Unlock()
	p.Cut()
}

func (p *Proxy) accept(lis net.Listener) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

// track adds c to the open connections, or says the proxy is cut.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) forward(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout(p.network, target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		_ = c.Close()
		_ = up.Close()
		return
	}
	defer p.untrack(c, up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(heldWriter{c: c, hold: &p.hold}, up); done <- struct{}{} }()
	<-done
}
