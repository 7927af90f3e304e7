// Command bench-compare runs make bench-compare: the pdp and OPA under the
// same load, the paired Go benchmarks, one table of ratios printed and
// written into docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/callerauth/callerauth/internal/tools/benchcompare"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
}

func run() error {
	opa := flag.String("opa", filepath.Join(os.Getenv("CALLERAUTH_OPA_BIN"), "opa"), "the OPA binary (make opa-tools builds it)")
	duration := flag.Duration("duration", 10*time.Second, "how long each HTTP load runs")
	conns := flag.Int("connections", 8, "connections of the load generator")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime for the paired benchmarks")
	count := flag.Int("count", 3, "rounds: each HTTP load runs this many times for --duration/count, the peers in turn, and each paired benchmark this many times, both halves in turn; every figure is its fastest round")
	write := flag.String("write", "docs/performance.md", "the file whose bench-compare section receives the table (empty: print only)")
	ffmpeg := flag.String("ffmpeg", "ffmpeg", "the ffmpeg the vmafx node is compared with (make test installs Debian's)")
	nodeFrames := flag.Int("node-frames", 120, "frames of the 1920x1080 pair the vmafx node and ffmpeg measure")
	only := flag.String("only", "", "run one section and print its rows, writing nothing: latency (the pdp, the pdp with its decision log and OPA at 1, 8 and 64 connections: the latency, CPU and decision-log rows); empty: every section")
	flag.Parse()
	switch *only {
	case "":
	case "latency":
		*write = ""
	default:
		return fmt.Errorf("--only %q: want latency, or nothing for every section", *only)
	}
	if _, err := os.Stat(*opa); err != nil { //nolint:gosec // the operator's own flag, naming a binary to run.
		return fmt.Errorf("--opa: %w (make opa-tools builds it)", err)
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pdpBin := filepath.Join(dir, "pdp")
	if out, err := exec.Command("go", "build", "-o", pdpBin, "./cmd/pdp").CombinedOutput(); err != nil { //nolint:gosec // the go command building this module's pdp into a temporary directory.
		return fmt.Errorf("building the pdp: %w\n%s", err, out)
	}
	emptyBin := filepath.Join(dir, "empty-server")
	if out, err := exec.Command("go", "build", "-o", emptyBin, "./cmd/empty-server").CombinedOutput(); err != nil { //nolint:gosec // the go command building this module's floor server into a temporary directory.
		return fmt.Errorf("building the empty server: %w\n%s", err, out)
	}
	peers, err := benchcompare.StartPeers(ctx, dir, pdpBin, *opa, emptyBin, "examples/secrets-engine/rego/secretsengine.rego")
	if err != nil {
		return err
	}
	defer peers.Close()
	n, err := benchcompare.Agree(ctx, peers)
	if err != nil {
		return fmt.Errorf("the pdp and OPA disagree: %w", err)
	}
	fmt.Printf("the pdp and OPA agree on all %d requests\n", n)
	if *only == "latency" {
		latency, err := benchcompare.LatencyLoads(ctx, peers, []int{1, 8, 64}, *duration, *count)
		if err != nil {
			return err
		}
		fmt.Println(benchcompare.Markdown(benchcompare.LatencyRows(latency), fmt.Sprintf("--only latency: %s × %d rounds", *duration, *count)))
		return nil
	}
	rec0, sig0, err := peers.SigningGroups(ctx)
	if err != nil {
		return err
	}
	loads, err := benchcompare.LoadAll(ctx, peers, *conns, *duration, *count)
	if err != nil {
		return err
	}
	rec1, sig1, err := peers.SigningGroups(ctx)
	if err != nil {
		return err
	}
	latency, err := benchcompare.LatencyLoads(ctx, peers, []int{1, 8, 64}, *duration, *count)
	if err != nil {
		return err
	}
	peers.Close()
	proxyRows, err := compareProxies(ctx, dir, emptyBin, *duration, *count)
	if err != nil {
		return err
	}
	ffBin, err := exec.LookPath(*ffmpeg)
	if err != nil {
		return fmt.Errorf("--ffmpeg: %w (apt-get install ffmpeg)", err)
	}
	nodeRow, err := benchcompare.NodeVsFFmpeg(ctx, dir, ffBin, 1920, 1080, *nodeFrames, *count)
	if err != nil {
		return err
	}
	m, err := benchcompare.RunPairs(ctx, "go", ".", *benchtime, *count, benchcompare.Pairs)
	if err != nil {
		return err
	}
	pairRows, err := benchcompare.PairRows(benchcompare.Pairs, m)
	if err != nil {
		return err
	}
	rows := append(append(append(append(benchcompare.LoadRows(loads), benchcompare.LatencyRows(latency)...), proxyRows...), nodeRow), pairRows...)
	host, _ := os.Hostname()
	about := fmt.Sprintf("Run of %s on %s (%d CPUs, %s): HTTP rows %d connections (the latency and CPU rows 1, 8 and 64; CPU is each server's own, user and system, from /proc) × %s each in %d rounds (the peers in turn; each figure its fastest round, the ratio's spread over the rounds beside it, a goal met only when its worst round meets it), plain HTTP on loopback; paired Go benchmarks at -benchtime %s, the fastest of %d runs each (both halves in turn). The pdp and OPA agreed on all %d requests first. Under its %d-connection rounds the pdp with caller auth signed %.0f checks with %.0f signatures (group-commit signing: %.2f records a signature).",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, runtime.NumCPU(), runtime.Version(), *conns, *duration, *count, *benchtime, *count, n, *conns, rec1-rec0, sig1-sig0, (rec1-rec0)/max(1, sig1-sig0))
	table := benchcompare.Markdown(rows, about)
	fmt.Println(table)
	if *write != "" {
		if err := benchcompare.WriteInto(*write, table); err != nil {
			return err
		}
		fmt.Println("written into", *write)
	}
	return nil
}

// compareProxies measures callerauth-proxy beside the bare ReverseProxy at
// 1, 8 and 64 connections, both in front of the empty upstream.
func compareProxies(ctx context.Context, dir, emptyBin string, d time.Duration, count int) ([]benchcompare.Row, error) {
	bins := map[string]string{}
	for _, name := range []string{"callerauth-proxy", "bare-proxy"} {
		bins[name] = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", bins[name], "./cmd/"+name).CombinedOutput(); err != nil { //nolint:gosec // the go command building this module's proxies into a temporary directory.
			return nil, fmt.Errorf("building %s: %w\n%s", name, err, out)
		}
	}
	p, err := benchcompare.StartProxies(ctx, dir, bins["callerauth-proxy"], bins["bare-proxy"], emptyBin)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	loads, err := benchcompare.ProxyLoads(ctx, p, []int{1, 8, 64}, d, count)
	if err != nil {
		return nil, err
	}
	return benchcompare.ProxyRows(loads), nil
}
