// Package framing checks HTTP/1.x request framing on the wire.
//
// net/http resolves an ambiguous request the way RFC 9112 lets it — net/http resolves an ambiguous
// Transfer-Encoding overrides a
// Content-Length, which it then deletes — so a handler cannot see that a
// request carried both, and a body framed one way and read the other
// holds the connection until the read timeout. Each connection of an
// HTTP/1.x server is read through a framing reader that follows the
// requests as they go by (their heads, and their bodies' lengths, so as
// to find the next head) and stops at the first request whose framing it
// will not accept: nothing after that request's head reaches net/http,
// whose reads of it fail at once, and the request is answered 400 with
// Connection: close before its handler runs. A connection that becomes
// something else (an answered Upgrade, a CONNECT) is passed on as it is;
// HTTP/2 has framing of its own, which net/http checks.
package framing

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Problem is what is wrong with a request's framing: Key is the stable
// word (a metric label), Text the sentence its 400 says.
type Problem struct{ Key, Text string }

// The framing problems a request is refused for.
var (
	ProblemBoth       = Problem{"both_framings", "the request has both Content-Length and Transfer-Encoding (RFC 9112 §6.1: a request smuggling shape)"}
	ProblemTwoLengths = Problem{"content_length_repeated", "Content-Length is given more than once"}
	ProblemBadLength  = Problem{"content_length_invalid", "Content-Length is not a decimal number of bytes"}
	ProblemBadTE      = Problem{"transfer_encoding_unsupported", "Transfer-Encoding other than chunked alone is not accepted"}
	ProblemTEOnHTTP10 = Problem{"transfer_encoding_http10", "Transfer-Encoding on an HTTP/1.0 request, which HTTP/1.0 does not define"}
	ProblemBodyless   = Problem{"body_on_bodyless_method", "has no body, but the request declares one (Content-Length or Transfer-Encoding)"}
	ProblemFolded     = Problem{"folded_header", "a header field is folded over lines (obs-fold, RFC 9112 §5.2)"}
	ProblemBadField   = Problem{"header_line_invalid", "a header line is not name: value (RFC 9112 §5.1: no space before the colon)"}
	ProblemBadChunk   = Problem{"chunk_invalid", "the chunked body is malformed (a chunk size that is not hex, or a chunk not ended by CRLF)"}
	ProblemTrailer    = Problem{"trailer", "trailer fields are not accepted"}
	ProblemBadLine    = Problem{"request_line_invalid", "the request line is not METHOD target HTTP/1.x"}
)

// Problems are every problem, for a metric's labels and the docs.
var Problems = []Problem{ProblemBoth, ProblemTwoLengths, ProblemBadLength, ProblemBadTE, ProblemTEOnHTTP10, ProblemBodyless,
	ProblemFolded, ProblemBadField, ProblemBadChunk, ProblemTrailer, ProblemBadLine}

const (
	maxFramingLine     = 4096 // a chunk-size or trailer line, as net/http bounds it
	maxChunkSizeDigits = 16
)

// errFraming is what net/http reads once a connection's framing was
// refused: nothing after the refused request's head is passed on.
var errFraming = errors.New("serve: the request's framing was refused; the connection is closed")

// bodylessMethods declare no content: RFC 9110 §9.3.1, §9.3.2 (content
// "might lead some implementations to reject the request and close the
// connection because of its potential as a request smuggling attack"),
// §9.3.6 (CONNECT) and §9.3.8 (TRACE: "A client MUST NOT send content").
var bodylessMethods = []string{"GET", "HEAD", "TRACE", "CONNECT"}

// framingListener reads each HTTP/1.x connection it accepts through a
// framingConn. With tls set it terminates TLS itself — the handshake off
// the accepting goroutine, within timeout — so that it reads the
// plaintext; a connection that negotiates h2 is handed on as the
// *tls.Conn net/http serves HTTP/2 on.
type framingListener struct {
	net.Listener
	tls     *tls.Config
	timeout time.Duration
	line    int // the longest head line followed: --http-max-header-bytes

	start  sync.Once
	conns  chan net.Conn
	errs   chan error
	closed chan struct{}
	close  sync.Once
}

// Listener returns lis with each HTTP/1.x connection's requests read
// through the framing check; with cfg set, it terminates TLS itself
// (each handshake within handshakeTimeout). maxHead bounds a head's line
// as the server bounds its heads (http.Server.MaxHeaderBytes + 4096):
// past it the server refuses the request itself. Serve it with
// http.Server.ConnContext set to [ConnContext], and ask [Refused] of each
// request before anything else.
func Listener(lis net.Listener, cfg *tls.Config, handshakeTimeout time.Duration, maxHead int) net.Listener {
	return newFramingListener(lis, cfg, handshakeTimeout, maxHead)
}

func newFramingListener(lis net.Listener, cfg *tls.Config, handshakeTimeout time.Duration, maxLine int) *framingListener {
	return &framingListener{Listener: lis, tls: cfg, timeout: handshakeTimeout, line: maxLine,
		conns: make(chan net.Conn), errs: make(chan error), closed: make(chan struct{})}
}

// Accept returns the next connection, its handshake done when TLS is on.
func (l *framingListener) Accept() (net.Conn, error) {
	if l.tls == nil {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		return newFramingConn(c, nil, l.line), nil
	}
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections being handshaken are closed.
func (l *framingListener) Close() error {
	l.close.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// acceptLoop accepts TCP connections and handshakes each on a goroutine
// of its own, as net/http would, so that a client slow to handshake holds
// nobody else up.
func (l *framingListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err: // net/http retries a temporary error, and stops on another
			case <-l.closed:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.handshake(c)
	}
}

func (l *framingListener) handshake(c net.Conn) {
	tc := tls.Server(c, l.tls)
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		_ = c.Close()
		return
	}
	var out net.Conn = tc
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		out = newFramingConn(tc, tc, l.line)
	}
	select {
	case l.conns <- out:
	case <-l.closed:
		_ = c.Close()
	}
}

// framingConn is a connection whose HTTP/1.x requests are read through
// the framing reader.
type framingConn struct {
	net.Conn
	tls *tls.Conn // nil over plaintext

	mu   sync.Mutex
	f    framing
	dead bool // a request's framing was refused: reads fail from here on

	// refusedHead is the 1-based index of the request refused (0: none),
	// and problem what is wrong with it; served counts the requests the
	// handler has seen on this connection, in order.
	refusedHead atomic.Int64
	problem     atomic.Pointer[Problem]
	served      atomic.Int64
}

func newFramingConn(c net.Conn, tc *tls.Conn, maxLine int) *framingConn {
	fc := &framingConn{Conn: c, tls: tc}
	fc.f.maxHead = maxLine
	return fc
}

// ConnectionState lets net/http set Request.TLS for an HTTP/1.x request
// over TLS.
func (c *framingConn) ConnectionState() tls.ConnectionState {
	if c.tls == nil {
		return tls.ConnectionState{}
	}
	return c.tls.ConnectionState()
}

// CloseWrite closes the connection for writing (guard's lingering close).
func (c *framingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *framingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return 0, errFraming
	}
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kept, problem, head := c.f.feed(p[:n])
	if problem.Key != "" {
		c.dead = true
		c.problem.Store(&problem)
		c.refusedHead.Store(int64(head))
		if kept == 0 {
			return 0, errFraming
		}
		return kept, nil
	}
	return n, err
}

// Write notes an answered Upgrade: from a 101 on, the connection is no
// longer HTTP/1.x, and is passed on as it is.
func (c *framingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.f.upgrading && (bytes.HasPrefix(p, []byte("HTTP/1.1 101")) || bytes.HasPrefix(p, []byte("HTTP/1.0 101"))) {
		c.f.state = framingPass
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// refused reports the problem of the request the handler now serves,
// when it is the one the framing reader refused.
func (c *framingConn) refused() Problem {
	n := c.served.Add(1)
	if h := c.refusedHead.Load(); h != 0 && h == n {
		return *c.problem.Load()
	}
	return Problem{}
}

type framingConnKey struct{}

// ConnContext keeps the connection in its requests' context: it is
// http.Server.ConnContext for a server on [Listener].
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingConnKey{}, fc)
	}
	return ctx
}

// Refused is what is wrong with r's framing when the connection's reader
// refused it (ok): the request is to be answered 400 with Connection:
// close, before anything reads it (the connection's reads fail from its
// head on). Not ok for a request it accepted, one over HTTP/2, or one not
// served on a [Listener]. Ask it once per request, in order: it counts
// them.
func Refused(r *http.Request) (Problem, bool) {
	fc, ok := r.Context().Value(framingConnKey{}).(*framingConn)
	if !ok || r.ProtoMajor != 1 {
		return Problem{}, false
	}
	p := fc.refused()
	if p == ProblemBodyless {
		p.Text = "a " + r.Method + " request " + p.Text
	}
	return p, p.Key != ""
}

// The framing reader's states.
const (
	framingHead    = iota // in a request's head (or before one)
	framingLength         // in a body of known length
	framingChunk          // at a chunk-size line
	framingData           // in a chunk's data
	framingDataEnd        // at the CRLF after a chunk's data
	framingTrailer        // in the trailer section, after the last chunk
	framingPass           // no longer HTTP/1.x (or past what it follows): passed on
)

// framing follows a connection's HTTP/1.x requests byte by byte.
type framing struct {
	state   int
	maxHead int

	line   []byte // the line being read (head, chunk size, trailer)
	inHead bool   // the request line was read
	heads  int    // the heads seen
	remain int64  // bytes left of a body or a chunk
	crlf   int    // bytes of a chunk's closing CRLF seen

	// The current head.
	method             string // a bodyless method's name, else ""
	http10             bool
	lengths, encodings []string
	upgrade, connUpgr  bool
	upgrading          bool // the last head asks for an Upgrade: a 101 may follow
	problem            Problem
}

// feed reads b; when a request's framing is refused it returns the bytes
// of b up to the end of that request's head, the problem, and the head's
// index.
func (f *framing) feed(b []byte) (kept int, problem Problem, head int) {
	for i := 0; i < len(b); i++ {
		switch f.state {
		case framingPass:
			return len(b), Problem{}, 0
		case framingLength:
			n := min(int64(len(b)-i), f.remain)
			f.remain -= n
			i += int(n) - 1
			if f.remain == 0 {
				f.state = framingHead
			}
			continue
		case framingData:
			n := min(int64(len(b)-i), f.remain)
			f.remain -= n
			i += int(n) - 1
			if f.remain == 0 {
				f.state, f.crlf = framingDataEnd, 0
			}
			continue
		case framingDataEnd:
			if b[i] != "\r\n"[f.crlf] { // exactly CRLF, as net/http reads it
				return i, ProblemBadChunk, f.heads
			}
			if f.crlf++; f.crlf == 2 {
				f.state = framingChunk
			}
			continue
		}
		// A line: a head's, a chunk size's or a trailer's — read in place
		// when this read holds all of it, gathered when it spans reads.
		limit := maxFramingLine
		if f.state == framingHead {
			limit = f.maxHead
		}
		end := bytes.IndexByte(b[i:], '\n')
		if end < 0 || len(f.line)+end > limit {
			if end < 0 {
				f.line = append(f.line, b[i:]...)
			}
			if end >= 0 || len(f.line) > limit {
				// Longer than net/http reads: it refuses the request
				// itself (431, or a malformed chunk), and closes.
				f.state = framingPass
			}
			return len(b), Problem{}, 0
		}
		line := b[i : i+end]
		if len(f.line) > 0 {
			f.line = append(f.line, line...)
			line = f.line
		}
		i += end
		line, crlf := bytes.CutSuffix(line, []byte("\r"))
		f.line = f.line[:0]
		var p Problem
		switch f.state {
		case framingHead:
			p = f.headLine(line)
		case framingChunk:
			p = ProblemBadChunk // a bare LF: net/http refuses it too
			if crlf {
				p = f.chunkLine(line)
			}
		case framingTrailer:
			if len(line) == 0 {
				f.state = framingHead
				continue
			}
			p = ProblemTrailer
		}
		if p.Key != "" {
			return i + 1, p, f.heads
		}
	}
	return len(b), Problem{}, 0
}

// headLine reads one line of a head; at its end it decides the request's
// framing.
func (f *framing) headLine(line []byte) Problem {
	if !f.inHead {
		if len(line) == 0 {
			return Problem{} // an empty line before a request (RFC 9112 §2.2)
		}
		f.heads++
		f.inHead, f.lengths, f.encodings, f.upgrade, f.connUpgr, f.upgrading, f.problem = true, f.lengths[:0], f.encodings[:0], false, false, false, Problem{}
		method, rest, ok1 := bytes.Cut(line, []byte(" "))
		_, proto, ok2 := bytes.Cut(rest, []byte(" "))
		if !ok1 || !ok2 || !bytes.HasPrefix(proto, []byte("HTTP/1.")) {
			if bytes.HasPrefix(line, []byte("PRI * HTTP/2.0")) {
				f.state = framingPass // HTTP/2 prior knowledge: net/http's to judge
				return Problem{}
			}
			f.problem = ProblemBadLine
		}
		f.method = ""
		for _, m := range bodylessMethods { // the name itself, not a copy of the bytes
			if string(method) == m {
				f.method = m
			}
		}
		f.http10 = string(proto) == "HTTP/1.0"
		return Problem{}
	}
	if len(line) > 0 {
		if line[0] == ' ' || line[0] == '\t' {
			f.problem = firstProblem(f.problem, ProblemFolded)
			return Problem{}
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || bytes.ContainsAny(name, " \t") {
			f.problem = firstProblem(f.problem, ProblemBadField)
			return Problem{}
		}
		// Only the fields that frame the request are kept, without a copy
		// of any other.
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			f.lengths = append(f.lengths, strings.Trim(string(value), " \t"))
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			f.encodings = append(f.encodings, strings.Trim(string(value), " \t"))
		case bytes.EqualFold(name, []byte("upgrade")):
			f.upgrade = true
		case bytes.EqualFold(name, []byte("connection")):
			for t := range bytes.SplitSeq(value, []byte(",")) {
				f.connUpgr = f.connUpgr || bytes.EqualFold(bytes.Trim(t, " \t"), []byte("upgrade"))
			}
		}
		return Problem{}
	}
	// The end of the head: its framing.
	f.inHead = false
	if f.problem.Key != "" {
		return f.problem
	}
	switch {
	case len(f.lengths) > 0 && len(f.encodings) > 0:
		return ProblemBoth
	case len(f.lengths) > 1:
		return ProblemTwoLengths
	case len(f.encodings) > 0 && f.http10:
		return ProblemTEOnHTTP10
	case len(f.encodings) > 1 || (len(f.encodings) == 1 && !strings.EqualFold(f.encodings[0], "chunked")):
		return ProblemBadTE
	}
	var length int64
	if len(f.lengths) == 1 {
		n, err := strconv.ParseInt(f.lengths[0], 10, 64)
		if err != nil || n < 0 || strings.ContainsAny(f.lengths[0], "+-") {
			return ProblemBadLength
		}
		length = n
	}
	chunked := len(f.encodings) == 1
	if f.method != "" && (chunked || length > 0) {
		return ProblemBodyless
	}
	switch {
	case f.method == "CONNECT":
		f.state = framingPass // a tunnel, once answered
	case chunked:
		f.state = framingChunk
	case length > 0:
		f.state, f.remain = framingLength, length
	default:
		f.upgrading = f.upgrade && f.connUpgr
	}
	return Problem{}
}

// chunkLine reads a chunk-size line: hex digits, then extensions.
func (f *framing) chunkLine(line []byte) Problem {
	size, _, _ := bytes.Cut(line, []byte(";"))
	size = bytes.TrimRight(size, " \t")
	if len(size) == 0 || len(size) > maxChunkSizeDigits {
		return ProblemBadChunk
	}
	n, err := strconv.ParseUint(string(size), 16, 63)
	if err != nil {
		return ProblemBadChunk
	}
	if n == 0 {
		f.state = framingTrailer
		return Problem{}
	}
	f.state, f.remain = framingData, int64(n)
	return Problem{}
}

func firstProblem(have, p Problem) Problem {
	if have.Key != "" {
		return have
	}
	return p
}
