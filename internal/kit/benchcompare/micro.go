package benchcompare

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
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
	{Row: "credentials: gRPC call with the token file looked at every call (stat; read when changed) vs a static token", Pkg: "./credentials", Bench: "BenchmarkGRPCCall", Ours: "file-token", Base: "static-token", Target: 1.05},
	{Row: "credentials: the same vs client-go's cached file token source (re-read at most once a minute)", Pkg: "./credentials", Bench: "BenchmarkGRPCCall", Ours: "file-token", Base: "client-go-cached-file"},
	{Row: "credentials: a static token vs no token (what any bearer token costs)", Pkg: "./credentials", Bench: "BenchmarkGRPCCall", Ours: "static-token", Base: "no-token"},
	{Row: "platform-connector batch, auth with a cached verdict vs auth disabled", Pkg: "./internal/services/connector", Bench: "BenchmarkBatch", Ours: "auth-cached", Base: "auth-disabled"},
}

// Measured is one benchmark's figures.
type Measured struct {
	NsPerOp, BytesPerOp, AllocsPerOp float64
}

// RunPairs runs each package's paired benchmarks count times, the packages
// in turn (benchtime as go test takes it, e.g. "1s" or "200x"), and
// returns, by full benchmark name (without the GOMAXPROCS suffix), the
// figures of each benchmark's fastest run: on a shared 2-core machine a
// run slowed by something else is not the code's cost, and both halves of
// a pair are treated alike.
func RunPairs(ctx context.Context, goBin, moduleDir, benchtime string, count int, pairs []Pair) (map[string]Measured, error) {
	if count < 1 {
		count = 1
	}
	byPkg := map[string][]string{}
	var order []string
	for _, p := range pairs {
		if _, ok := byPkg[p.Pkg]; !ok {
			order = append(order, p.Pkg)
		}
		byPkg[p.Pkg] = append(byPkg[p.Pkg], "^"+strings.SplitN(p.Bench, "/", 2)[0]+"$")
	}
	out := map[string]Measured{}
	for range count { // the packages in turn, count times: drift falls on every pair alike
		for _, pkg := range order {
			cmd := exec.CommandContext(ctx, goBin, "test", "-run", "^$", "-bench", strings.Join(dedupe(byPkg[pkg]), "|"), "-benchmem", "-benchtime", benchtime, "-count", "1", pkg) //nolint:gosec // the go command on the module's own packages.
			cmd.Dir = moduleDir
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("benchcompare: go test -bench %s: %w\n%s", pkg, err, buf.String())
			}
			for name, m := range parseBench(buf.Bytes()) {
				if prev, ok := out[name]; !ok || m.NsPerOp < prev.NsPerOp {
					out[name] = m // the fastest of the runs
				}
			}
		}
	}
	return out, nil
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
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
