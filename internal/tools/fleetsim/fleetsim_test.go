package fleetsim_test

import (
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/tools/fleetsim"
)

// TestFleet: a success-only cache sends each replica about one TokenReview
// per pod per TTL (a little less: after a verdict expires, the next review
// waits for the pod's next request to that replica; a little more: a
// rotated token is reviewed at first sight); with --caller-review-interval
// 30m the same fleet sends at least ten times fewer.
func TestFleet(t *testing.T) {
	base := fleetsim.Config{Nodes: 3, PodsPerNode: 100, PublishEvery: 5 * time.Second, TokenLifetime: time.Hour, RotateAt: 0.8,
		Replicas: 2, CacheTTL: time.Minute, CacheMaxEntries: 400, Seed: 1}
	plain, err := fleetsim.Run(base)
	if err != nil {
		t.Fatal(err)
	}
	perTTL := float64(plain.Pods) / time.Minute.Seconds() // per replica
	if plain.PerReplica < 0.8*perTTL || plain.PerReplica > 1.05*perTTL {
		t.Fatalf("%.2f TokenReviews/s per replica; want about pods/TTL = %.2f", plain.PerReplica, perTTL)
	}
	recheck := base
	recheck.ReviewInterval = 30 * time.Minute
	r, err := fleetsim.Run(recheck)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != plain.Requests || r.HitRatio != plain.HitRatio {
		t.Fatalf("the two runs saw different traffic: %d/%v against %d/%v", r.Requests, r.HitRatio, plain.Requests, plain.HitRatio)
	}
	if r.ReviewsPerSecond*10 > plain.ReviewsPerSecond {
		t.Fatalf("%.2f TokenReviews/s with the review interval against %.2f without: want at least 10x fewer", r.ReviewsPerSecond, plain.ReviewsPerSecond)
	}
	t.Logf("300 pods, 2 replicas, TTL 1m: %.2f TokenReviews/s per replica (pods/TTL %.2f); with a 30m review interval %.2f (%.1fx fewer)",
		plain.PerReplica, perTTL, r.PerReplica, plain.ReviewsPerSecond/r.ReviewsPerSecond)
	if _, err := fleetsim.Run(fleetsim.Config{}); err == nil {
		t.Fatal("an empty fleet was simulated")
	}
}

// TestFleetWatchingBoundObjects: with the bound-object view, every token
// of a pod the view holds is answered without a TokenReview, rotations
// included; the view holds the fleet's pods and service accounts.
func TestFleetWatchingBoundObjects(t *testing.T) {
	cfg := fleetsim.Config{Nodes: 3, PodsPerNode: 100, PublishEvery: 5 * time.Second, TokenLifetime: time.Hour, RotateAt: 0.8,
		Replicas: 2, CacheTTL: time.Minute, CacheMaxEntries: 400, ServiceAccounts: 30, WatchBoundObjects: true, Seed: 1}
	r, err := fleetsim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Reviews != 0 || r.Fallbacks != 0 || r.ViewObjects != 330 || r.Requests == 0 {
		t.Fatalf("%+v: want no TokenReview, no fallback, 330 objects per view", r)
	}
	if _, _, b := fleetsim.EntryBytes(); b <= 0 || b > 4096 {
		t.Fatalf("%d bytes per view object", b)
	}
	_, _, b := fleetsim.EntryBytes()
	t.Logf("%d requests, %d TokenReviews; %d bytes per view object", r.Requests, r.Reviews, b)
}
