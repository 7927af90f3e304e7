// Package faults puts a switchable fault in front of an HTTP handler, for
// tests and the demo of validator failures: answer normally, answer with a
// status code, answer slowly, or not at all. It also counts requests per
// path, so that a test can assert how many TokenReviews were made.
package faults

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Mode is what the server does with the next requests.
type Mode struct {
	// Status, when non-zero, is answered instead of calling the handler.
	Status int
	// Delay is waited before answering (or until the client gives up).
	Delay time.Duration
}

// Handler wraps an http.Handler with a fault switch and counters. It is safe
// for concurrent use.
type Handler struct {
	next   http.Handler
	mu     sync.Mutex
	mode   Mode
	counts map[string]int
}

// Wrap returns a Handler in front of next, answering normally.
func Wrap(next http.Handler) *Handler {
	return &Handler{next: next, counts: map[string]int{}}
}

// Set changes the mode for requests from now on.
func (h *Handler) Set(m Mode) {
	h.mu.Lock()
	h.mode = m
	h.mu.Unlock()
}

// Count returns how many requests reached path (answered or faulted).
func (h *Handler) Count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[path]
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	m := h.mode
	h.counts[r.URL.Path]++
	h.mu.Unlock()
	if m.Delay > 0 {
		select {
		case <-time.After(m.Delay):
		case <-r.Context().Done():
			// The client is gone: drop the connection rather than let
			// net/http finish the exchange with an empty 200, which a
			// slow server never sends.
			panic(http.ErrAbortHandler)
		}
	}
	if m.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(m.Status)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected fault","code":` + strconv.Itoa(m.Status) + `}`))
		return
	}
	h.next.ServeHTTP(w, r)
}
