package window

import (
	"testing"
	"time"
)

// TestCounter: uses count up to the limit within a window, a use that
// would pass it is refused with the time left, the next window starts
// afresh, keys are counted apart, and the number of keys is bounded.
func TestCounter(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := New(time.Minute, 2)
	if ok, _ := c.Take("a", 6, 10, now); !ok {
		t.Fatal("6 of 10")
	}
	if ok, retry := c.Take("a", 5, 10, now.Add(20*time.Second)); ok || retry != 40*time.Second {
		t.Fatalf("11 of 10: ok %t, retry %s; want refused, 40s", ok, retry)
	}
	if ok, _ := c.Take("a", 4, 10, now.Add(30*time.Second)); !ok {
		t.Fatal("10 of 10")
	}
	if ok, _ := c.Take("b", 10, 10, now.Add(30*time.Second)); !ok {
		t.Fatal("another key")
	}
	if ok, _ := c.Take("a", 10, 10, now.Add(time.Minute)); !ok {
		t.Fatal("the next window")
	}
	c.Take("c", 1, 10, now.Add(time.Minute))
	if len(c.m) > 2 {
		t.Fatalf("%d keys held; the bound is 2", len(c.m))
	}
	if ok, _ := c.Take("z", 1000, 0, now); !ok {
		t.Fatal("no limit")
	}
}
