package benchcompare

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Pair is a row from a package's paired Go benchmark: two sub-benchmarks
// of one benchmark, run in the same go test, ours against a baseline.
type Pair struct {
	Row        string
	Pkg        string // import path, relative to the module root
	Bench      string // the benchmark with its shared path, e.g. BenchmarkVerify/ES256
	Ours, Base string // sub-benchmark names
	// Throughput: the ratio is base ns/op over ours (higher is better);
	// otherwise ours over base (the cost ratio, lower is better).
	Throughput bool
	Target     float64 // 0: reported, no target
}

// Pairs are the micro rows of make bench-compare.
var Pairs = []Pair{
	{Row: "offline verify (authn/oidc) vs bare crypto/ecdsa, ES256", Pkg: "./authn/oidc", Bench: "BenchmarkVerify/ES256", Ours: "verifier", Base: "crypto", Throughput: true, Target: 0.9},
	{Row: "offline verify (authn/oidc) vs bare crypto/rsa, RS256", Pkg: "./authn/oidc", Bench: "BenchmarkVerify/RS256", Ours: "verifier", Base: "crypto", Throughput: true, Target: 0.9},
	{Row: "offline verify (authn/oidc) vs bare crypto/ed25519, EdDSA", Pkg: "./authn/oidc", Bench: "BenchmarkVerify/EdDSA", Ours: "verifier", Base: "crypto", Throughput: true, Target: 0.9},
	{Row: "pdp check in process (no HTTP): signed by an Ed25519 key vs by the default ECDSA P-256 key", Pkg: "./internal/services/pdp", Bench: "BenchmarkCheck", Ours: "EdDSA", Base: "ES256"},
	{Row: "verdict cache hit (authn.Cache) vs k8s.io/apiserver's cached token authenticator hit", Pkg: "./authn", Bench: "BenchmarkCacheHitVsAPIServer", Ours: "callerauth", Base: "apiserver", Target: 0.5},
	{Row: "guard, cached verdict, gRPC unary vs no auth", Pkg: "./guard", Bench: "BenchmarkGRPC", Ours: "guard-cached", Base: "no-auth", Target: 1.05},
	{Row: "guard, cached verdict, HTTP vs no auth", Pkg: "./guard", Bench: "BenchmarkHTTP", Ours: "guard-cached", Base: "no-auth", Target: 1.05},
	{Row: "credentials: gRPC call with the token file looked at every call (inotify on Linux; stat and read when changed) vs a static token", Pkg: "./credentials", Bench: "BenchmarkGRPCCall", Ours: "file-token", Base: "static-token", Target: 1.05},
	{Row: "credentials: the same vs client-go's cached file token source (re-read at most once a minute)", Pkg: "./credentials", Bench: "BenchmarkGRPCCall", Ours: "file-token", Base: "client-go-cached-file"},
	{Row: "credentials: a static token vs no token (what any bearer token costs)", Pkg: "./credentials", Bench: "BenchmarkGRPCCall", Ours: "static-token", Base: "no-token"},
	{Row: "platform-connector batch, auth with a cached verdict vs auth disabled", Pkg: "./internal/services/connector", Bench: "BenchmarkBatch", Ours: "auth-cached", Base: "auth-disabled"},
}

// Measured is one benchmark's figures.
type Measured struct {
	NsPerOp, BytesPerOp, AllocsPerOp float64
	// Rounds are ns/op of each round, in order (the fastest is NsPerOp).
	Rounds []float64
}

// RunPairs measures each pair's two halves in turn, count rounds, each
// half alone in its own run of the package's compiled test binary
// (benchtime as go test takes it, e.g. "1s" or "200x"): ours then the
// baseline in one round, the baseline then ours in the next, so that a
// machine slowing down or speeding up over the run weighs on both halves
// alike. It returns, by full benchmark name (without the GOMAXPROCS
// suffix), the figures of each half's fastest run: a run slowed by
// something else on a shared 2-core machine is not the code's cost.
func RunPairs(ctx context.Context, goBin, moduleDir, benchtime string, count int, pairs []Pair) (map[string]Measured, error) {
	count = max(1, count)
	dir, err := os.MkdirTemp("", "bench-pairs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bins := map[string]string{}
	for _, p := range pairs {
		if _, ok := bins[p.Pkg]; ok {
			continue
		}
		bin := filepath.Join(dir, fmt.Sprintf("pkg%d.test", len(bins)))
		cmd := exec.CommandContext(ctx, goBin, "test", "-c", "-o", bin, p.Pkg) //nolint:gosec // the go command on the module's own packages.
		cmd.Dir = moduleDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("benchcompare: go test -c %s: %w\n%s", p.Pkg, err, out)
		}
		bins[p.Pkg] = bin
	}
	out := map[string]Measured{}
	done := map[string]int{} // runs of each half so far, in this round
	for round := range count {
		clear(done)
		for _, p := range pairs {
			halves := []string{p.Ours, p.Base}
			if round%2 == 1 {
				halves[0], halves[1] = halves[1], halves[0]
			}
			for _, half := range halves {
				name := p.Bench + "/" + half
				if done[name] > 0 {
					continue // a baseline two rows share: measured once a round
				}
				done[name]++
				m, err := runOne(ctx, bins[p.Pkg], filepath.Join(moduleDir, p.Pkg), name, benchtime)
				if err != nil {
					return nil, err
				}
				prev, ok := out[name]
				m.Rounds = append(prev.Rounds, m.NsPerOp)
				if ok && prev.NsPerOp <= m.NsPerOp {
					prev.Rounds = m.Rounds
					m = prev
				}
				out[name] = m
			}
		}
	}
	return out, nil
}

// runOne runs one benchmark of a compiled test binary in its package's
// directory and returns its figures.
func runOne(ctx context.Context, bin, pkgDir, name, benchtime string) (Measured, error) {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", strings.Join(parts, "/"), "-test.benchmem", "-test.benchtime", benchtime) //nolint:gosec // a test binary this run compiled.
	cmd.Dir = pkgDir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return Measured{}, fmt.Errorf("benchcompare: %s: %w\n%s", name, err, buf.String())
	}
	m, ok := parseBench(buf.Bytes())[name]
	if !ok {
		return Measured{}, fmt.Errorf("benchcompare: %s: no result in\n%s", name, buf.String())
	}
	return m, nil
}

// parseBench reads go test -bench -benchmem output.
func parseBench(b []byte) map[string]Measured {
	out := map[string]Measured{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		var m Measured
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				m.NsPerOp = v
			case "B/op":
				m.BytesPerOp = v
			case "allocs/op":
				m.AllocsPerOp = v
			}
		}
		if m.NsPerOp > 0 {
			out[shortName(f[0])] = m
		}
	}
	return out
}
