// Command fleet-sim simulates a fleet of publishing pods in front of a
// replicated service and prints, as a Markdown table, the TokenReviews per
// second its caller authentication sends the API server, for each fleet
// size and mode: a TokenReview per verdict-cache miss, and
// --caller-review-interval (offline verification, a review per credential
// per interval). docs/scale.md has its output and reads it.
//
//	go run ./cmd/fleet-sim -pods 10000,100000 -ttl 2m -review-intervals 30m,60m
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/callerauth/callerauth/internal/fleetsim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	f := flag.NewFlagSet("fleet-sim", flag.ContinueOnError)
	pods := f.String("pods", "10000,100000", "fleet sizes (pods), comma-separated")
	perNode := f.Int("pods-per-node", 100, "publishing pods per node")
	every := f.Duration("publish-every", 5*time.Second, "each pod publishes this often")
	lifetime := f.Duration("token-lifetime", time.Hour, "projected token lifetime (the kubelet's default request)")
	rotateAt := f.Float64("rotate-at", 0.8, "the kubelet replaces a token at this fraction of its lifetime")
	replicas := f.Int("replicas", 3, "service replicas behind one Service")
	ttls := f.String("ttl", "2m", "verdict-cache TTLs (--caller-cache-ttl), comma-separated")
	maxEntries := f.Int("cache-max-entries", 0, "verdict cache size per replica (--caller-cache-max-entries); 0: 1.2 x pods, so that every live token fits")
	intervals := f.String("review-intervals", "30m,60m", "--caller-review-interval values to compare, comma-separated (the success-only cache is always run)")
	warmup := f.Duration("warmup", 0, "simulated time before counting; 0: until every token has rotated and every review lapsed once (the longer of the rotation period and the review interval, plus the TTL)")
	measure := f.Duration("measure", 0, "simulated time counted; 0: one rotation period")
	if err := f.Parse(args); err != nil {
		return err
	}
	sizes, err := list(*pods, strconv.Atoi)
	if err != nil {
		return fmt.Errorf("-pods: %w", err)
	}
	ttlList, err := list(*ttls, time.ParseDuration)
	if err != nil {
		return fmt.Errorf("-ttl: %w", err)
	}
	var ivs []time.Duration
	if *intervals != "" {
		if ivs, err = list(*intervals, time.ParseDuration); err != nil {
			return fmt.Errorf("-review-intervals: %w", err)
		}
	}
	modes := append([]time.Duration{0}, ivs...)
	fmt.Printf("Fleet: %d pods per node publishing every %s; tokens of %s rotated at %.0f %%; %d replicas, requests spread at random; each row measured over one rotation period after a warm-up in which every token rotated and every review lapsed once (unless -warmup/-measure say otherwise).\n\n",
		*perNode, *every, *lifetime, *rotateAt*100, *replicas)
	fmt.Println("| pods | cache TTL | mode | deleted pod's token refused within | TokenReviews/s (all replicas) | per replica | vs success-only cache | cache hit ratio | entries per replica | memory per replica |")
	fmt.Println("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range sizes {
		for _, ttl := range ttlList {
			var base float64
			for _, iv := range modes {
				m := *maxEntries
				if m == 0 {
					m = n + n/5
				}
				r, err := fleetsim.Run(fleetsim.Config{Nodes: max(1, n / *perNode), PodsPerNode: min(n, *perNode), PublishEvery: *every,
					TokenLifetime: *lifetime, RotateAt: *rotateAt, Replicas: *replicas, CacheTTL: ttl, CacheMaxEntries: m,
					ReviewInterval: iv, Warmup: *warmup, Measure: *measure, Seed: uint64(n)}) //nolint:gosec // a seed from the pod count, which is positive
				if err != nil {
					return err
				}
				mode, window, ratio := "TokenReview per cache miss (success-only cache)", ttl.String(), "1×"
				if iv == 0 {
					base = r.ReviewsPerSecond
				} else {
					mode, window = "--caller-review-interval "+iv.String(), (iv + ttl).String()
					ratio = fmt.Sprintf("%.1f× fewer", base/r.ReviewsPerSecond)
				}
				entries := strconv.Itoa(r.CacheEntries)
				if r.RecheckEntries > 0 {
					entries += " + " + strconv.Itoa(r.RecheckEntries) + " reviews on record"
				}
				fmt.Printf("| %d | %s | %s | %s | %.0f | %.0f | %s | %.3f | %s | %.1f MiB |\n", r.Pods, ttl, mode, window,
					r.ReviewsPerSecond, r.PerReplica, ratio, r.HitRatio, entries, float64(r.BytesPerReplica)/(1<<20))
			}
		}
	}
	return nil
}

func list[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, p := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
