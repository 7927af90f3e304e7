// Package reliability_test measures what a flood of bad tokens costs the
// real pdp binary and the API server behind it (the dev issuer, counting
// the TokenReviews it receives), and what callers with a cached verdict see
// meanwhile. Bounded in count and time; loopback only.
package reliability_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/kit/e2e"
)

var pdpBin, connectorBin, callerauthBin string

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/pdp", "cmd/platform-connector", "cmd/callerauth"}, func() (func(), error) {
		pdpBin, connectorBin, callerauthBin = bins["pdp"], bins["platform-connector"], bins["callerauth"]
		return nil, nil
	})
}

const example = "../../examples/secrets-engine"

// phase is one flood: its bad-token generator and what it cost.
type phase struct {
	name                 string
	dur                  time.Duration // how long the flood lasts
	count                int64         // at most this many bad requests
	bad                  func(i int) string
	requests, reviews    int64
	elapsed              time.Duration
	answers              map[string]int64
	legitOK, legitAll    int64
	legitP99, legitP50   time.Duration
	heapBefore, heapPeak float64
}

func TestBadTokenFlood(t *testing.T) {
	const reviewQPS = 100
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	// Another issuer of the same name with another key: its tokens look right
	// until the signature is checked, so only a review can refuse them.
	forger, _ := devissuertest.Serve(t, devissuer.Config{})
	// A stranger: another issuer altogether.
	stranger, _ := devissuertest.Serve(t, devissuer.Config{Issuer: "https://stranger.example"})
	dir := t.TempDir()
	key := filepath.Join(dir, "signing.pem")
	if err := decision.GenerateKeyFile(key); err != nil {
		t.Fatal(err)
	}
	p := e2e.Start(t, pdpBin, []string{"--listen", "127.0.0.1:0", "--insecure-http", "--metrics-listen", "127.0.0.1:0",
		"--policy-dir", filepath.Join(example, "policy"), "--registry", filepath.Join(example, "registry.json"),
		"--kubeconfig", iss.KubeconfigFile(), "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine",
		"--signing-key-file", key, "--caller-issuer", devissuer.DefaultIssuer, "--caller-max-in-flight", "8", "--caller-cache-max-entries", "2000",
		"--caller-review-qps", strconv.Itoa(reviewQPS), "--caller-review-burst", strconv.Itoa(reviewQPS)})
	addr := p.LogValue(t, "pdp: serving", "address", 60*time.Second)
	metrics := p.LogValue(t, "pdp: serving", "metrics", time.Second)
	body, err := os.ReadFile(filepath.Join(example, "check_request_allow_rotate.json"))
	if err != nil {
		t.Fatal(err)
	}
	mint := func(i *devissuer.Issuer, aud string, issued time.Time) string {
		tok, err := i.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: "secrets-engine", Audiences: []string{aud}, Lifetime: 10 * time.Minute, IssuedAt: issued})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	good := mint(iss, "flex-auth", time.Time{})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	check := func(tok string) (int, string, time.Duration) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/check", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error(), time.Since(start)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		reason := ""
		if resp.StatusCode != http.StatusOK {
			_, after, _ := strings.Cut(string(b), `"reason":"`)
			reason, _, _ = strings.Cut(after, `"`)
		}
		return resp.StatusCode, reason, time.Since(start)
	}
	if code, reason, _ := check(good); code != http.StatusOK {
		t.Fatalf("the good caller: %d %s", code, reason)
	}
	// Pre-minted bad tokens, distinct, so that no cache helps the flood.
	const perKind = 300
	expired, otherAud, foreign, forged := make([]string, perKind), make([]string, perKind), make([]string, perKind), make([]string, perKind)
	fresh := make([]string, 4000) // forged, each used once: every one needs a review
	for i := range perKind {
		expired[i] = mint(iss, "flex-auth", time.Now().Add(-time.Hour))
		otherAud[i] = mint(iss, "another-service", time.Time{})
		foreign[i] = mint(stranger, "flex-auth", time.Time{})
		forged[i] = mint(forger, "flex-auth", time.Time{})
	}
	for i := range fresh {
		fresh[i] = mint(forger, "flex-auth", time.Time{})
	}
	phases := []*phase{
		{name: "refusable without review (expired, other audience, other issuer, not a JWT)", dur: 2 * time.Second, count: 20000, bad: func(i int) string {
			switch i % 4 {
			case 0:
				return expired[i/4%perKind]
			case 1:
				return otherAud[i/4%perKind]
			case 2:
				return foreign[i/4%perKind]
			default:
				return "opaque-" + strconv.Itoa(i)
			}
		}},
		{name: "right issuer and audience, wrong key (only a review can tell)", dur: 2 * time.Second, count: 20000, bad: func(i int) string { return forged[i%perKind] }},
		// Every refusal is cached briefly, so distinct garbage fills the
		// cache: more of it than the cache holds.
		{name: "distinct non-JWTs (more than the cache's 2,000 entries)", dur: 3 * time.Second, count: 20000, bad: func(i int) string { return "garbage-" + strconv.Itoa(i) }},
		// Every request a new token only a review can judge: the review
		// rate limit is what bounds the API server's load.
		{name: "right issuer and audience, wrong key, a new token every request", dur: 2 * time.Second, count: int64(len(fresh)), bad: func(i int) string { return fresh[i-1] }},
	}
	for _, ph := range phases {
		ph.answers = map[string]int64{}
		ph.heapBefore = gauge(t, metrics, "go_memstats_heap_inuse_bytes")
		before := iss.Reviews()
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), ph.dur)
		var mu sync.Mutex
		var wg, flood sync.WaitGroup
		var n atomic.Int64
		for range 8 { // flooding clients
			flood.Add(1)
			go func() {
				defer flood.Done()
				for ctx.Err() == nil {
					i := n.Add(1)
					if i > ph.count {
						return
					}
					code, reason, _ := check(ph.bad(int(i)))
					mu.Lock()
					ph.answers[fmt.Sprintf("%d %s", code, reason)]++
					mu.Unlock()
				}
			}()
		}
		var lat []time.Duration
		for range 2 { // callers with a cached verdict
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					code, _, d := check(good)
					mu.Lock()
					ph.legitAll++
					if code == http.StatusOK {
						ph.legitOK++
					}
					lat = append(lat, d)
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		go func() {
			for ctx.Err() == nil {
				if h := gauge(t, metrics, "go_memstats_heap_inuse_bytes"); h > ph.heapPeak {
					mu.Lock()
					ph.heapPeak = h
					mu.Unlock()
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		flood.Wait()
		ph.elapsed = time.Since(began)
		cancel() // the cached callers stop with the flood
		wg.Wait()
		ph.requests = min(n.Load(), ph.count)
		ph.reviews = iss.Reviews() - before
		slices.Sort(lat)
		if len(lat) > 0 {
			ph.legitP50, ph.legitP99 = lat[len(lat)/2], lat[len(lat)*99/100]
		}
	}
	// After the flood: nothing left in flight, the cache within its bound,
	// and the heap back within a small factor of where it started.
	time.Sleep(2 * time.Second)
	inFlight := gauge(t, metrics, "pdp_caller_verifications_in_flight")
	entries := gauge(t, metrics, "pdp_caller_cache_entries")
	evictions := gauge(t, metrics, "pdp_caller_cache_evictions_total")
	heapAfter := gauge(t, metrics, "go_memstats_heap_inuse_bytes")
	if code, reason, _ := check(good); code != http.StatusOK {
		t.Errorf("the good caller after the flood: %d %s", code, reason)
	}
	t.Logf("%-78s %8s %8s %s", "flood", "requests", "reviews", "answers; cached callers: ok/all, p50, p99; heap in use before → peak")
	for _, ph := range phases {
		t.Logf("%-78s %8d %8d %v; %d/%d, %s, %s; %.1f → %.1f MiB", ph.name, ph.requests, ph.reviews, ph.answers,
			ph.legitOK, ph.legitAll, ph.legitP50.Round(time.Microsecond), ph.legitP99.Round(time.Microsecond), ph.heapBefore/(1<<20), ph.heapPeak/(1<<20))
	}
	t.Logf("after the flood: %g verifications in flight, %g cache entries (%g evicted), heap in use %.1f MiB (%.1f before the first flood)",
		inFlight, entries, evictions, heapAfter/(1<<20), phases[0].heapBefore/(1<<20))
	if inFlight != 0 {
		t.Errorf("%g verifications still in flight after the flood; want 0", inFlight)
	}
	if entries > 2000 || evictions == 0 {
		t.Errorf("the cache holds %g entries after %d distinct bad tokens, %g evicted; want at most 2,000 (--caller-cache-max-entries), the oldest evicted", entries, phases[2].requests, evictions)
	}
	if before := phases[0].heapBefore; before == 0 || heapAfter > 4*before {
		t.Errorf("heap in use %.1f MiB after the flood, %.1f MiB before; want within 4×", heapAfter/(1<<20), before/(1<<20))
	}
	if ph := phases[3]; float64(ph.reviews) > reviewQPS*(1+ph.elapsed.Seconds())+10 ||
		ph.answers["401 token_invalid"]+ph.answers["503 validator_unavailable"] != ph.requests {
		t.Errorf("distinct forged tokens: %d reviews in %s for %d requests, answers %v; want at most --caller-review-burst + --caller-review-qps × time (%d + %d/s), every answer 401 token_invalid or 503 validator_unavailable",
			ph.reviews, ph.elapsed, ph.requests, ph.answers, reviewQPS, reviewQPS)
	}
	if ph := phases[2]; ph.reviews != 0 || ph.answers["401 token_invalid"] != ph.requests {
		t.Errorf("distinct garbage: %d reviews for %d requests, answers %v; want none, all 401 token_invalid", ph.reviews, ph.requests, ph.answers)
	}
	if ph := phases[0]; ph.reviews != 0 || ph.answers["401 token_invalid"] != ph.requests {
		t.Errorf("locally refusable tokens cost %d TokenReviews for %d requests (answers %v); want none, all 401 token_invalid", ph.reviews, ph.requests, ph.answers)
	}
	if ph := phases[1]; ph.reviews > perKind || ph.answers["401 token_invalid"]+ph.answers["503 validator_unavailable"] != ph.requests {
		t.Errorf("forged tokens: %d reviews for %d requests, answers %v; want at most one review per distinct token (%d), every answer 401 token_invalid or 503 validator_unavailable (shed)", ph.reviews, ph.requests, ph.answers, perKind)
	}
	for _, ph := range phases {
		if ph.legitAll == 0 || ph.legitOK != ph.legitAll {
			t.Errorf("%s: cached callers got %d/%d answers right during the flood", ph.name, ph.legitOK, ph.legitAll)
		}
	}
}

// gauge reads one unlabelled gauge from a Prometheus text endpoint, 0 when
// it cannot be read (it is polled from goroutines that may not fail the
// test).
func gauge(_ *testing.T, addr, name string) float64 {
	m, _ := metricsAt(addr)
	return m[name]
}
