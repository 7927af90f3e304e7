// Package capture holds what a process or a logger writes while a test
// reads it: a buffer safe for one writer goroutine and concurrent readers.
package capture

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer whose Write and String may run concurrently.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (c *Buffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

// String returns everything written so far.
func (c *Buffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}
