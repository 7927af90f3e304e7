// Package cost measures what a piece of work costs the process: the bytes
// it allocated and the CPU time it used, for the tests that hold a
// request's cost to a bound per request byte (docs/reliability.md). Bytes
// are asserted; CPU time is reported, never asserted.
package cost

import (
	"runtime"
	"syscall"
	"time"
)

// Of is what f cost the whole process while it ran: bytes allocated and
// CPU time (user and system), after a collection so that earlier garbage
// is not counted.
func Of(f func()) (allocated uint64, cpu time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c0 := CPU()
	f()
	c1 := CPU()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, c1 - c0
}

// CPU is the process's CPU time so far, user and system (0 where the
// system does not say): a benchmark's CPU per operation, where its work
// runs on goroutines of its own, is the difference over b.N.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
