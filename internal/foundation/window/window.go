// Package window counts what each key uses in fixed windows of time: a
// quota of so much per window per key (a tenant's submissions a minute, a
// publisher's events a minute), with a bounded number of keys.
package window

import (
	"sync"
	"time"
)

// Counter counts uses per key in windows of Every. Safe for concurrent use.
type Counter struct {
	every   time.Duration
	maxKeys int

	mu sync.Mutex
	m  map[string]*slot
}

type slot struct {
	start time.Time
	used  int
}

// New counts in windows of every, for at most maxKeys keys at once (past
// it, the keys whose window has ended are forgotten, then the oldest).
func New(every time.Duration, maxKeys int) *Counter {
	return &Counter{every: every, maxKeys: max(maxKeys, 1), m: map[string]*slot{}}
}

// Take counts n uses of key at now against limit (0 or less: no limit),
// or, when they would pass it, counts nothing and says how long until the
// key's window ends.
func (c *Counter) Take(key string, n, limit int, now time.Time) (ok bool, retry time.Duration) {
	if limit <= 0 {
		return true, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.m[key]
	if s == nil || now.Sub(s.start) >= c.every || now.Before(s.start) {
		if s == nil && len(c.m) >= c.maxKeys {
			c.forget(now)
		}
		s = &slot{start: now}
		c.m[key] = s
	}
	if s.used+n > limit {
		return false, s.start.Add(c.every).Sub(now)
	}
	s.used += n
	return true, 0
}

// forget drops the keys whose window has ended, else the oldest one.
func (c *Counter) forget(now time.Time) {
	var oldest string
	for k, s := range c.m {
		if now.Sub(s.start) >= c.every {
			delete(c.m, k)
			continue
		}
		if oldest == "" || s.start.Before(c.m[oldest].start) {
			oldest = k
		}
	}
	if len(c.m) >= c.maxKeys && oldest != "" {
		delete(c.m, oldest)
	}
}
