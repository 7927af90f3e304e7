package framing

import (
	"strings"
	"testing"
)

// BenchmarkFeed is the framing reader's cost for one keep-alive request:
// a head of a proxied request (a bearer token of about a kilobyte among
// its fields) and a 2 KiB body framed by its length.
func BenchmarkFeed(b *testing.B) {
	head := "POST /apis/v1/things HTTP/1.1\r\nHost: upstream.example\r\nUser-Agent: bench/1\r\nAuthorization: Bearer " + strings.Repeat("t", 1024) +
		"\r\nContent-Type: application/json\r\nAccept: */*\r\nContent-Length: 2048\r\n\r\n"
	req := []byte(head + strings.Repeat("x", 2048))
	f := framing{maxHead: 1 << 20}
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		if _, p, _ := f.feed(req); p.Key != "" {
			b.Fatal(p.Text)
		}
	}
}
