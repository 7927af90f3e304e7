// Package bench_test runs make bench-compare's comparison as a smoke: the
// real pdp binary and OPA serving the example policy, short loads that must
// be answered correctly, the paired benchmarks once each. Nothing here
// asserts a time; the figures are make bench-compare's.
package bench_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/benchcompare"
	"github.com/callerauth/callerauth/test/e2e"
)

var pdpBin, opaBin string

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/pdp"}, func() (func(), error) {
		pdpBin = bins["pdp"]
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
	// 10 and 100, a search, OPA. Rows: one per load but OPA's, and the pdp's
	// p99.
	if len(loads) != 7 || len(rows) != 7 {
		t.Fatalf("%d loads, %d rows", len(loads), len(rows))
	}
	latency, err := benchcompare.LatencyLoads(ctx, peers, []int{1, 4}, 200*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	if lr := benchcompare.LatencyRows(latency); len(latency) != 4 || len(lr) != 2 {
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
