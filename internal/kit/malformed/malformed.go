// Package malformed sends requests whose HTTP/1.x framing is wrong —
// both framings, bad chunks, a body on a method that has none, trailers,
// folded or broken header lines — to a server, raw, and reports how each
// was answered: every such request must be answered at once, 4xx or 5xx,
// and its connection closed, never read one way and held until the
// server's read timeout. A well-framed pair of pipelined requests must
// both be answered: the check follows the stream, it does not lose it.
package malformed

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Shape is one raw request. Problem is the words the 400 must contain
// ("" when the answer need not come from the framing check: net/http
// refuses the shape itself, or the handler fails reading the body).
type Shape struct {
	Name, Raw, Problem string
}

// Shapes are the malformed requests, each a POST (or the method it
// names) to path on host, with auth as its Authorization header ("" for
// none).
func Shapes(host, path, auth string) []Shape {
	h := "Host: " + host + "\r\n"
	if auth != "" {
		h += "Authorization: " + auth + "\r\n"
	}
	h += "Content-Type: application/json\r\n"
	post := "POST " + path + " HTTP/1.1\r\n" + h
	return []Shape{
		{"both framings, a body framed by its length", post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello", "both Content-Length and Transfer-Encoding"},
		{"both framings, a body framed by its chunks", post + "Transfer-Encoding: chunked\r\nContent-Length: 12\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding"},
		{"both framings on HTTP/1.0", "POST " + path + " HTTP/1.0\r\n" + h + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", "both Content-Length and Transfer-Encoding"},
		{"Transfer-Encoding on HTTP/1.0", "POST " + path + " HTTP/1.0\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "HTTP/1.0"},
		{"Content-Length twice", post + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "more than once"},
		{"Content-Length as a list", post + "Content-Length: 2, 2\r\n\r\n{}", ""},
		{"Content-Length not a number", post + "Content-Length: +2\r\n\r\n{}", ""},
		{"Transfer-Encoding other than chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", ""},
		{"Transfer-Encoding twice", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", ""},
		{"a folded Transfer-Encoding", post + "Transfer-Encoding:\r\n chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", ""},
		{"a space before the colon", post + "Transfer-Encoding : chunked\r\nContent-Length: 2\r\n\r\n{}", ""},
		{"a chunk size that is not hex", post + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", ""},
		{"a chunk size of seventeen digits", post + "Transfer-Encoding: chunked\r\n\r\n00000000000000002\r\n{}\r\n0\r\n\r\n", ""},
		{"a chunk size ended by a bare LF", post + "Transfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n", ""},
		{"a chunk longer than its size", post + "Transfer-Encoding: chunked\r\n\r\n1\r\n{}\r\n0\r\n\r\n", ""},
		{"a chunk shorter than its size, then the next", post + "Transfer-Encoding: chunked\r\n\r\n3\r\n{}\r\n0\r\n\r\n", ""},
		{"trailer fields", post + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nAuthorization: Bearer x\r\n\r\n", ""},
		{"a body on a GET, never sent", "GET " + path + " HTTP/1.1\r\n" + h + "Content-Length: 5\r\n\r\n", "has no body"},
		{"a chunked body on a GET", "GET " + path + " HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "has no body"},
		{"a body on a HEAD", "HEAD " + path + " HTTP/1.1\r\n" + h + "Content-Length: 2\r\n\r\n{}", ""}, // a HEAD answer has no body to name it
		{"a body on a TRACE", "TRACE " + path + " HTTP/1.1\r\n" + h + "Content-Length: 2\r\n\r\n{}", "has no body"},
	}
}

// Pipelined is two well-framed requests on one connection: a POST of
// body to path, sent in two chunks (a chunk extension on the first),
// and a GET of path; the server must answer both.
func Pipelined(host, path, auth, body string) string {
	h := "Host: " + host + "\r\n"
	if auth != "" {
		h += "Authorization: " + auth + "\r\n"
	}
	half := len(body) / 2
	return "POST " + path + " HTTP/1.1\r\n" + h + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x;x=y\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", half, body[:half], len(body)-half, body[half:]) +
		"GET " + path + " HTTP/1.1\r\n" + h + "\r\n"
}

// Deadline bounds each exchange: far below a read timeout the server
// under test is given (TestServer holds its servers to minutes).
const Deadline = 20 * time.Second

// Answer is how one raw request was answered.
type Answer struct {
	Status int
	Body   string
	Closed bool // the server closed the connection after the answer
}

// Send writes raw on a new connection from dial and reads the answer
// and what follows it: the server's close, or nothing until Deadline.
func Send(dial func() (net.Conn, error), raw string) (Answer, error) {
	c, err := dial()
	if err != nil {
		return Answer{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(Deadline))
	if _, err := io.WriteString(c, raw); err != nil {
		return Answer{}, err
	}
	br := bufio.NewReader(c)
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return Answer{}, fmt.Errorf("no answer: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if err != nil {
		return Answer{}, fmt.Errorf("the answer's body: %w", err)
	}
	a := Answer{Status: resp.StatusCode, Body: string(b)}
	_, err = br.ReadByte()
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		// Held open: the connection was kept for another request.
	case err != nil:
		a.Closed = true
	}
	return a, nil
}

// Check sends every shape, and fails t for one not refused at once (a
// 4xx or 5xx, and the connection closed). With pipelined set — a body
// path answers keeping its connection — it sends the pipelined pair
// too, and fails t unless both are answered.
func Check(t *testing.T, dial func() (net.Conn, error), host, path, auth, pipelined string) {
	t.Helper()
	for _, s := range Shapes(host, path, auth) {
		a, err := Send(dial, s.Raw)
		switch {
		case err != nil:
			t.Errorf("%s: %v (held until the test's deadline of %v?)", s.Name, err, Deadline)
		case a.Status < 400:
			t.Errorf("%s: %d %.200q; want it refused", s.Name, a.Status, a.Body)
		case !a.Closed:
			t.Errorf("%s: %d, and the connection was held open; want it closed", s.Name, a.Status)
		case s.Problem != "" && (a.Status != 400 || !strings.Contains(a.Body, s.Problem)):
			t.Errorf("%s: %d %.300q; want 400 naming %q", s.Name, a.Status, a.Body, s.Problem)
		}
	}
	if pipelined == "" {
		return
	}
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(Deadline))
	if _, err := io.WriteString(c, Pipelined(host, path, auth, pipelined)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined request %d: no answer: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if i == 0 && resp.Close {
			t.Fatalf("pipelined request 1: %d %.200q, close %v: want it answered on a connection kept", resp.StatusCode, b, resp.Close)
		}
	}
}

// TLSDialer dials addr over TLS with HTTP/1.1 (ALPN), trusting roots.
func TLSDialer(addr string, cfg *tls.Config) func() (net.Conn, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	return func() (net.Conn, error) { return tls.Dial("tcp", addr, cfg) }
}

// TCPDialer dials addr in plaintext.
func TCPDialer(addr string) func() (net.Conn, error) {
	return func() (net.Conn, error) { return net.Dial("tcp", addr) }
}
