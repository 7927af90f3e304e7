// Package bench_test runs make bench-compare's comparison as a smoke: the
// real pdp binary and OPA serving the example policy, short loads that must
// be answered correctly, the paired benchmarks once each. Nothing here
// asserts a time; the figures are make bench-compare's.
package bench_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/tools/benchcompare"
)

var pdpBin, opaBin, proxyBin, bareBin, emptyBin string

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/pdp", "cmd/callerauth-proxy", "cmd/bare-proxy", "cmd/empty-server"}, func() (func(), error) {
		pdpBin, proxyBin, bareBin, emptyBin = bins["pdp"], bins["callerauth-proxy"], bins["bare-proxy"], bins["empty-server"]
		opaBin = filepath.Join(os.Getenv("CALLERAUTH_OPA_BIN"), "opa")
		if _, err := os.Stat(opaBin); err != nil {
			return nil, fmt.Errorf("test/bench needs OPA (%w): run it through make test, or make opa-tools and set CALLERAUTH_OPA_BIN", err)
		}
		return nil, nil
	})
}

// TestPDPAndOPAAgreeAndAnswer: the pdp and OPA decide every request the
// same (effect and reason), and each peer answers a short load with the
// allow, every answer checked.
func TestPDPAndOPAAgreeAndAnswer(t *testing.T) {
	ctx := context.Background()
	peers, err := benchcompare.StartPeers(ctx, t.TempDir(), pdpBin, opaBin, "", "../../examples/secrets-engine/rego/secretsengine.rego")
	if err != nil {
		t.Fatal(err)
	}
	defer peers.Close()
	n, err := benchcompare.Agree(ctx, peers)
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("only %d requests compared", n)
	}
	loads, err := benchcompare.LoadAll(ctx, peers, 2, 300*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Every check the pdp answered was signed: alone or in a group, never
	// more signatures than records.
	records, signatures, err := peers.SigningGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if records < float64(loads[0].Result.Requests) || signatures < 1 || signatures > records {
		t.Fatalf("the pdp signed %v records with %v signatures; it answered %d checks", records, signatures, loads[0].Result.Requests)
	}
	rows := benchcompare.LoadRows(loads)
	// Loads: the pdp, the pdp without caller auth, AuthZEN single, batches of
	// 10 and 100, a search, OPA, OPA's minimal rule. Rows: one per load but
	// the two OPAs', the pdp's p99, and AuthZEN single vs /v1/check.
	if len(loads) != 8 || len(rows) != 8 {
		t.Fatalf("%d loads, %d rows", len(loads), len(rows))
	}
	// Each server's CPU per request was read from /proc: never nothing.
	for _, l := range loads {
		if l.CPUPerRequest <= 0 {
			t.Errorf("%s: CPU per request %v", l.Name, l.CPUPerRequest)
		}
	}
	latency, err := benchcompare.LatencyLoads(ctx, peers, []int{1, 4}, 200*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	// At each concurrency: throughput and CPU against either OPA, the
	// decision log's throughput and CPU under each mode, and p99.
	if lr := benchcompare.LatencyRows(latency); len(latency) != 10 || len(lr) != 18 {
		t.Fatalf("%d latency loads, %d rows", len(latency), len(lr))
	} else {
		rows = append(rows, lr...)
	}
	t.Log("\n" + benchcompare.Markdown(rows, "smoke (not a measurement)"))
}

// TestPairsMeasured: every paired benchmark the table names exists and is
// parsed.
func TestPairsMeasured(t *testing.T) {
	m, err := benchcompare.RunPairs(context.Background(), "go", "../..", "1x", 1, benchcompare.Pairs)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := benchcompare.PairRows(benchcompare.Pairs, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(benchcompare.Pairs) {
		t.Fatalf("%d rows for %d pairs", len(rows), len(benchcompare.Pairs))
	}
}

// TestNodeVsFFmpegMeasured: the vmafx row runs — the node and the real
// ffmpeg each measure a small pair — and gives a ratio.
func TestNodeVsFFmpegMeasured(t *testing.T) {
	ff, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatal("ffmpeg is the vmafx row's peer: make test installs it")
	}
	row, err := benchcompare.NodeVsFFmpeg(context.Background(), t.TempDir(), ff, 320, 240, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !(row.Ratio > 0) || row.Target != benchcompare.NodeTarget {
		t.Fatalf("row %+v", row)
	}
	t.Logf("%s: %s vs %s", row.Name, row.Ours, row.Base)
}

// TestProxiesAnswer: callerauth-proxy and the bare ReverseProxy each pass
// a short load to the same upstream, every answer the upstream's, and the
// rows compare them at each concurrency.
func TestProxiesAnswer(t *testing.T) {
	ctx := context.Background()
	p, err := benchcompare.StartProxies(ctx, t.TempDir(), proxyBin, bareBin, emptyBin)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	loads, err := benchcompare.ProxyLoads(ctx, p, []int{1, 4}, 200*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loads {
		if l.CPUPerRequest <= 0 || l.Result.Requests == 0 {
			t.Errorf("%s: %d requests, CPU per request %v", l.Name, l.Result.Requests, l.CPUPerRequest)
		}
	}
	rows := benchcompare.ProxyRows(loads)
	if len(rows) != 6 {
		t.Fatalf("%d rows for 2 concurrencies", len(rows))
	}
	t.Log("\n" + benchcompare.Markdown(rows, "smoke (not a measurement)"))
}
