// Command fleet-sim simulates a fleet of publishing pods in front of a
// replicated service and prints, as a Markdown table, the TokenReviews per
// second its caller authentication sends the API server, for each fleet
// size and mode: a TokenReview per verdict-cache miss,
// --caller-review-interval (offline verification, a review per credential
// per interval) and --caller-watch-bound-objects (offline verification
// beside a watch of pods and service accounts); then what the watch costs
// the API server and each service, for a Deployment and for a node agent.
// docs/scale.md has its output and reads it.
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

	"github.com/callerauth/callerauth/internal/foundation/version"
	"github.com/callerauth/callerauth/internal/tools/fleetsim"
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
	watch := f.Bool("watch", true, "also run --caller-watch-bound-objects, and print what the watch costs")
	accounts := f.Int("service-accounts", 0, "service accounts the pods run as, for the watch; 0: one per 10 pods")
	churn := f.Float64("pod-churn", 0.1, "the watch model: fraction of the pods replaced per hour")
	eventsPerPod := f.Int("events-per-pod", 6, "the watch model: events a pod's life sends each watcher of it (added, status updates, deletion)")
	warmup := f.Duration("warmup", 0, "simulated time before counting; 0: until every token has rotated and every review lapsed once (the longer of the rotation period and the review interval, plus the TTL)")
	measure := f.Duration("measure", 0, "simulated time counted; 0: one rotation period")
	showVersion := f.Bool("version", false, "print the build (version, revision, Go) and exit")
	if err := f.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println("fleet-sim", version.Get().String())
		return nil
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
	type mode struct {
		interval time.Duration
		watch    bool
	}
	modes := []mode{{}}
	for _, iv := range ivs {
		modes = append(modes, mode{interval: iv})
	}
	if *watch {
		modes = append(modes, mode{watch: true})
	}
	saFor := func(n int) int {
		if *accounts > 0 {
			return *accounts
		}
		return max(1, n/10)
	}
	fmt.Printf("Fleet: %d pods per node publishing every %s; tokens of %s rotated at %.0f %%; %d replicas, requests spread at random; each row measured over one rotation period after a warm-up in which every token rotated and every review lapsed once (unless -warmup/-measure say otherwise).\n\n",
		*perNode, *every, *lifetime, *rotateAt*100, *replicas)
	fmt.Println("| pods | cache TTL | mode | deleted pod's token refused within | TokenReviews/s (all replicas) | per replica | vs success-only cache | cache hit ratio | entries per replica | memory per replica |")
	fmt.Println("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range sizes {
		for _, ttl := range ttlList {
			var base float64
			for _, md := range modes {
				m := *maxEntries
				if m == 0 {
					m = n + n/5
				}
				r, err := fleetsim.Run(fleetsim.Config{Nodes: max(1, n / *perNode), PodsPerNode: min(n, *perNode), PublishEvery: *every,
					TokenLifetime: *lifetime, RotateAt: *rotateAt, Replicas: *replicas, CacheTTL: ttl, CacheMaxEntries: m,
					ReviewInterval: md.interval, WatchBoundObjects: md.watch, ServiceAccounts: saFor(n),
					Warmup: *warmup, Measure: *measure, Seed: uint64(n)}) //nolint:gosec // a seed from the pod count, which is positive
				if err != nil {
					return err
				}
				name, window, ratio := "TokenReview per cache miss (success-only cache)", ttl.String(), "1×"
				switch {
				case md.watch:
					name, window = "--caller-watch-bound-objects", "the watch's delay (seconds); TTL + 10 s while it is broken"
					ratio = "none sent"
					if r.Reviews > 0 {
						ratio = fmt.Sprintf("%.1f× fewer", base/r.ReviewsPerSecond)
					}
				case md.interval == 0:
					base = r.ReviewsPerSecond
				default:
					name, window = "--caller-review-interval "+md.interval.String(), (md.interval + ttl).String()
					ratio = fmt.Sprintf("%.1f× fewer", base/r.ReviewsPerSecond)
				}
				entries := strconv.Itoa(r.CacheEntries)
				if r.RecheckEntries > 0 {
					entries += " + " + strconv.Itoa(r.RecheckEntries) + " reviews on record"
				}
				if r.ViewObjects > 0 {
					entries += " + " + strconv.Itoa(r.ViewObjects) + " objects watched"
				}
				fmt.Printf("| %d | %s | %s | %s | %.0f | %.0f | %s | %.3f | %s | %.1f MiB |\n", r.Pods, ttl, name, window,
					r.ReviewsPerSecond, r.PerReplica, ratio, r.HitRatio, entries, float64(r.BytesPerReplica)/(1<<20))
			}
		}
	}
	if *watch {
		watchTable(sizes, *perNode, *replicas, saFor, *churn, *eventsPerPod)
	}
	return nil
}

// watchTable prints what --caller-watch-bound-objects costs the API server
// and each service: for a Deployment whose every replica watches every pod,
// and for a node agent (the connector's socket role) watching its node's
// pods. Watches and events follow from the fleet (a model: every pod event
// goes to each watcher of that pod); memory from the bytes measured per
// view object and per cached verdict.
func watchTable(sizes []int, perNode, replicas int, saFor func(int) int, churn float64, eventsPerPod int) {
	cache, _, view := fleetsim.EntryBytes()
	fmt.Printf("\nThe watch (--caller-watch-bound-objects): %d bytes per watched pod or service account and %d per cached verdict, measured; %.0f %% of the pods replaced per hour, %d events per pod's life to each watcher of it; service-account changes not counted.\n\n",
		view, cache, churn*100, eventsPerPod)
	fmt.Println("| pods | service accounts | who watches | watches held by the API server | watch events/s sent | objects per watcher | memory per watcher (view + cache) | TokenReviews/s at steady state |")
	fmt.Println("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range sizes {
		sa := saFor(n)
		podEvents := float64(n) * churn * float64(eventsPerPod) / 3600
		nodes := max(1, n/perNode)
		mib := func(objects, verdicts int) float64 {
			return float64(int64(objects)*view+int64(verdicts)*cache) / (1 << 20)
		}
		fmt.Printf("| %d | %d | a Deployment, %d replicas, every pod | %d | %.1f | %d | %.1f MiB | 0 |\n",
			n, sa, replicas, 2*replicas, podEvents*float64(replicas), n+sa, mib(n+sa, n+n/5))
		fmt.Printf("| %d | %d | a node agent on each of %d nodes, its node's pods | %d | %.1f | %d | %.1f MiB | 0 |\n",
			n, sa, nodes, 2*nodes, podEvents, min(n, perNode)+sa, mib(min(n, perNode)+sa, min(n, perNode)))
	}
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
