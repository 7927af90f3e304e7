package copybuf_test

import (
	"testing"

	"github.com/callerauth/callerauth/internal/foundation/copybuf"
)

func TestPool(t *testing.T) {
	var p copybuf.Pool
	b := p.Get()
	if len(b) != copybuf.Size {
		t.Fatalf("Get: %d bytes, want %d", len(b), copybuf.Size)
	}
	p.Put(b)
	p.Put(make([]byte, 10)) // not the pool's: dropped
	if n := testing.AllocsPerRun(100, func() { p.Put(p.Get()) }); n != 0 {
		t.Errorf("a Get and a Put allocate %v times, want 0", n)
	}
	if b := p.Get(); len(b) != copybuf.Size {
		t.Errorf("Get after a foreign Put: %d bytes", len(b))
	}
}
