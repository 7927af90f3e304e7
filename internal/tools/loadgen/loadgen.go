// Package loadgen drives an HTTP endpoint with a fixed number of
// connections for a fixed time — the same load for callerauth's pdp and
// its peers in make bench-compare — and reports throughput and latency
// quantiles. It is a closed loop, like wrk: each connection sends its next
// request when the previous answer has been read.
package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Config is one run.
type Config struct {
	URL         string
	Body        []byte
	Header      http.Header
	Connections int           // default 8
	Duration    time.Duration // default 5s
	Warmup      time.Duration // not counted; default 1s
	Client      *http.Client  // default: keep-alive, Connections idle per host
	// Check, when set, judges each answer; one that fails counts as an
	// error and the first such error is reported.
	Check func(status int, body []byte) error
	// AtStart and AtEnd, when set, are called when the measured window
	// opens (after the warm-up) and when it closes: to read what the
	// server spent in it (its CPU time, say).
	AtStart, AtEnd func()
}

// Result is what a run measured.
type Result struct {
	Requests   int
	Errors     int
	FirstError error
	Elapsed    time.Duration
	P50, P99   time.Duration
}

// PerSecond is the throughput of answered requests.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Run drives the endpoint as configured.
func Run(ctx context.Context, c Config) (Result, error) {
	if c.URL == "" {
		return Result{}, errors.New("loadgen: no URL")
	}
	if c.Connections <= 0 {
		c.Connections = 8
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	} else if c.Warmup == 0 {
		c.Warmup = time.Second
	}
	client := c.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: c.Connections, MaxConnsPerHost: c.Connections}}
	}
	start := time.Now().Add(c.Warmup)
	end := start.Add(c.Duration)
	var mu sync.Mutex
	var res Result
	var lat []time.Duration
	var wg sync.WaitGroup
	if c.AtStart != nil || c.AtEnd != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, at := range []struct {
				t  time.Time
				fn func()
			}{{start, c.AtStart}, {end, c.AtEnd}} {
				select {
				case <-time.After(time.Until(at.t)):
				case <-ctx.Done():
					return
				}
				if at.fn != nil {
					at.fn()
				}
			}
		}()
	}
	for range c.Connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			var n, errs int
			var first error
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				err := once(ctx, client, c)
				d := time.Since(t0)
				if t0.Before(start) {
					continue
				}
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				n++
				local = append(local, d)
			}
			mu.Lock()
			res.Requests += n
			res.Errors += errs
			if res.FirstError == nil {
				res.FirstError = first
			}
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = c.Duration
	if len(lat) > 0 {
		slices.Sort(lat)
		res.P50 = lat[len(lat)/2]
		res.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

func once(ctx context.Context, client *http.Client, c Config) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(c.Body))
	if err != nil {
		return err
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if c.Check != nil {
		return c.Check(resp.StatusCode, body)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("loadgen: %s: status %d", c.URL, resp.StatusCode)
	}
	return nil
}
