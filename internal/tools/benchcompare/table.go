package benchcompare

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Row is one line of the comparison.
type Row struct {
	Name       string
	Ours, Base string // this run's absolute figures
	// Ratio is of each side's best round; Low and High the least and the
	// greatest of the ratios round by round (the peers measured in turn
	// within each round): the noise the figure carries. Zero: one round.
	Ratio, Low, High float64
	Throughput       bool    // the ratio is a throughput ratio (higher is better)
	Target           float64 // 0: none
}

// Worst is the ratio of the row's worst round: the least throughput
// ratio, the greatest cost ratio (the best-rounds ratio, when the row
// has no rounds).
func (r Row) Worst() float64 {
	switch {
	case r.Low == 0 && r.High == 0:
		return r.Ratio
	case r.Throughput:
		return min(r.Low, r.Ratio)
	default:
		return max(r.High, r.Ratio)
	}
}

// Met says whether the row meets its target in its worst round ("-"
// without one): a goal met by the best rounds alone is not met.
func (r Row) Met() string {
	w := r.Worst()
	switch {
	case r.Target == 0:
		return "-"
	case r.Throughput && w >= r.Target, !r.Throughput && w <= r.Target:
		return "yes"
	default:
		return "**no**"
	}
}

// spread sets r's Low and High to the least and greatest of ratio over
// the rounds both sides have (round i of each, measured in turn).
func spread(r Row, n int, ratio func(i int) float64) Row {
	for i := range n {
		x := ratio(i)
		if i == 0 || x < r.Low {
			r.Low = x
		}
		if i == 0 || x > r.High {
			r.High = x
		}
	}
	return r
}

// loadSpread is spread over two loads' rounds.
func loadSpread(r Row, ours, base Load, ratio func(a, b Round) float64) Row {
	return spread(r, min(len(ours.Rounds), len(base.Rounds)), func(i int) float64 { return ratio(ours.Rounds[i], base.Rounds[i]) })
}

// Ratios of two rounds, for loadSpread.
func perSecond(a, b Round) float64 { return a.Result.PerSecond() / b.Result.PerSecond() }
func p99(a, b Round) float64       { return float64(a.Result.P99) / float64(max(1, b.Result.P99)) }
func cpuPer(a, b Round) float64 {
	return float64(a.CPUPerRequest) / float64(max(1, b.CPUPerRequest))
}

func (r Row) target() string {
	switch {
	case r.Target == 0:
		return ""
	case r.Throughput:
		return fmt.Sprintf("≥ %.2g×", r.Target)
	default:
		return fmt.Sprintf("≤ %.3g×", r.Target)
	}
}

// LoadRows compares each pdp load with OPA's: throughput (decisions per
// second, for an AuthZEN batch every evaluation in it) and p99.
func LoadRows(loads []Load) []Row {
	var opa *Load
	for i := range loads {
		if loads[i].Role == "opa" {
			opa = &loads[i]
		}
	}
	if opa == nil {
		return nil
	}
	fig := func(l Load) string {
		unit := "/s"
		if l.Decisions > 1 {
			unit = fmt.Sprintf(" decisions/s (%.0f requests/s)", l.Result.PerSecond())
		}
		return fmt.Sprintf("%.0f%s, p50 %s, p99 %s", l.DecisionsPerSecond(), unit, l.Result.P50.Round(10*time.Microsecond), l.Result.P99.Round(10*time.Microsecond))
	}
	var rows []Row
	var check *Load
	for i := range loads {
		if loads[i].Role == "pdp" {
			check = &loads[i]
		}
	}
	for _, l := range loads {
		if l.Role == "opa" || l.Role == "opa-minimal" {
			continue
		}
		if l.Role == "authzen" && l.Decisions == 1 && check != nil && strings.Contains(l.Name, "one evaluation") {
			rows = append(rows, loadSpread(Row{Name: l.Name + " vs " + check.Name + ": requests/s", Ours: fig(l), Base: fig(*check),
				Ratio: l.Result.PerSecond() / check.Result.PerSecond(), Throughput: true, Target: 1}, l, *check, perSecond))
		}
		if l.Role == "floor" {
			for _, m := range loads {
				if m.Role == "pdp" || m.Role == "opa" {
					rows = append(rows, loadSpread(Row{Name: m.Name + " vs " + l.Name + ": requests/s", Ours: fig(m), Base: fig(l),
						Ratio: m.Result.PerSecond() / l.Result.PerSecond(), Throughput: true}, m, l, perSecond))
				}
			}
			continue
		}
		target := 0.0
		if l.Role == "authzen" && l.Decisions == 10 {
			target = 3
		}
		decisions := func(a, b Round) float64 {
			return perSecond(a, b) * float64(max(1, l.Decisions)) / float64(max(1, opa.Decisions))
		}
		rows = append(rows, loadSpread(Row{Name: l.Name + " vs " + opa.Name + ": decisions/s", Ours: fig(l), Base: fig(*opa),
			Ratio: l.DecisionsPerSecond() / opa.DecisionsPerSecond(), Throughput: true, Target: target}, l, *opa, decisions))
		if l.Role == "pdp" {
			rows = append(rows, loadSpread(Row{Name: l.Name + " vs " + opa.Name + ": p99 latency", Ours: l.Result.P99.Round(10 * time.Microsecond).String(),
				Base: opa.Result.P99.Round(10 * time.Microsecond).String(), Ratio: float64(l.Result.P99) / float64(opa.Result.P99), Target: 1}, l, *opa, p99))
		}
	}
	return rows
}

// DecisionLogTarget is issue 56's goal: the pdp keeping its decision log
// at most 1.10× the CPU a decision of the pdp without it, at 8 and 64
// connections.
const DecisionLogTarget = 1.10

// LatencyRows compares the pdp (caller authentication and a signed record)
// with OPA — the policy that decides as the pdp does, and the minimal rule
// — at each concurrency of LatencyLoads (Decisions holds the connections
// there): throughput (target ≥ 1×, against either), the server's own CPU
// time per decision (target ≤ 0.5× at 8 connections and more, the goal
// behind "twice OPA"), and p99 (target ≤ 1×).
func LatencyRows(loads []Load) []Row {
	var rows []Row
	byConns := map[int]map[string]Load{}
	var order []int
	for _, l := range loads {
		if byConns[l.Decisions] == nil {
			byConns[l.Decisions] = map[string]Load{}
			order = append(order, l.Decisions)
		}
		byConns[l.Decisions][l.Role] = l
	}
	cpu := func(l Load) string {
		return fmt.Sprintf("%.1f µs CPU a decision (%.0f/s)", float64(l.CPUPerRequest)/float64(time.Microsecond), l.Result.PerSecond())
	}
	tput := func(l Load) string {
		return fmt.Sprintf("%.0f/s, p99 %s", l.Result.PerSecond(), l.Result.P99.Round(10*time.Microsecond))
	}
	for _, c := range order {
		g := byConns[c]
		ours, ok := g["pdp"]
		if !ok {
			continue
		}
		cpuTarget := 0.0
		if c >= 8 {
			cpuTarget = 0.5
		}
		for _, peer := range []struct{ role, name string }{{"opa", "OPA"}, {"opa-minimal", "OPA, the minimal rule"}} {
			theirs, ok := g[peer.role]
			if !ok {
				continue
			}
			rows = append(rows,
				loadSpread(Row{Name: fmt.Sprintf("pdp: caller auth + signed record vs %s, %d connections: throughput", peer.name, c),
					Ours: tput(ours), Base: tput(theirs), Ratio: ours.Result.PerSecond() / theirs.Result.PerSecond(), Throughput: true, Target: 1}, ours, theirs, perSecond),
				loadSpread(Row{Name: fmt.Sprintf("pdp: caller auth + signed record vs %s, %d connections: server CPU per decision", peer.name, c),
					Ours: cpu(ours), Base: cpu(theirs), Ratio: float64(ours.CPUPerRequest) / float64(max(1, theirs.CPUPerRequest)), Target: cpuTarget}, ours, theirs, cpuPer))
		}
		for _, mode := range []struct{ role, name string }{{"pdp-log", "required"}, {"pdp-log-best-effort", "best-effort"}} {
			logged, ok := g[mode.role]
			if !ok {
				continue
			}
			target := 0.0
			if c >= 8 {
				target = DecisionLogTarget
			}
			rows = append(rows,
				loadSpread(Row{Name: fmt.Sprintf("pdp with its decision log (%s) vs without, %d connections: throughput", mode.name, c),
					Ours: tput(logged), Base: tput(ours), Ratio: logged.Result.PerSecond() / ours.Result.PerSecond(), Throughput: true}, logged, ours, perSecond),
				loadSpread(Row{Name: fmt.Sprintf("pdp with its decision log (%s) vs without, %d connections: server CPU per decision", mode.name, c),
					Ours: cpu(logged), Base: cpu(ours), Ratio: float64(logged.CPUPerRequest) / float64(max(1, ours.CPUPerRequest)), Target: target}, logged, ours, cpuPer))
		}
		if theirs, ok := g["opa"]; ok {
			fig := func(l Load) string {
				return fmt.Sprintf("p50 %s, p99 %s (%.0f/s)", l.Result.P50.Round(10*time.Microsecond), l.Result.P99.Round(10*time.Microsecond), l.Result.PerSecond())
			}
			rows = append(rows, loadSpread(Row{Name: fmt.Sprintf("pdp: caller auth + signed record vs OPA, %d connections: p99 latency", c),
				Ours: fig(ours), Base: fig(theirs), Ratio: float64(ours.Result.P99) / float64(theirs.Result.P99), Target: 1}, ours, theirs, p99))
		}
	}
	return rows
}

// PairRows turns measured benchmarks into rows; a pair not measured is an
// error.
func PairRows(pairs []Pair, m map[string]Measured) ([]Row, error) {
	var rows []Row
	var errs []error
	fig := func(x Measured) string {
		return fmt.Sprintf("%s/op, %.0f B, %.0f allocs", time.Duration(x.NsPerOp).Round(10*time.Nanosecond), x.BytesPerOp, x.AllocsPerOp)
	}
	for _, p := range pairs {
		ours, ok1 := m[p.Bench+"/"+p.Ours]
		base, ok2 := m[p.Bench+"/"+p.Base]
		if !ok1 || !ok2 {
			errs = append(errs, fmt.Errorf("benchcompare: %s: %s/{%s,%s} not measured", p.Pkg, p.Bench, p.Ours, p.Base))
			continue
		}
		r := Row{Name: p.Row, Ours: fig(ours), Base: fig(base), Throughput: p.Throughput, Target: p.Target}
		ratio := func(o, b float64) float64 {
			if p.Throughput {
				return b / o
			}
			return o / b
		}
		r.Ratio = ratio(ours.NsPerOp, base.NsPerOp)
		r = spread(r, min(len(ours.Rounds), len(base.Rounds)), func(i int) float64 { return ratio(ours.Rounds[i], base.Rounds[i]) })
		rows = append(rows, r)
	}
	return rows, errors.Join(errs...)
}

// Markdown renders the rows as a table, with a line saying what run made
// them.
func Markdown(rows []Row, about string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", about)
	b.WriteString("| comparison | callerauth (this run) | peer (this run) | ratio | rounds | target | met (worst round) |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		sense := "cost"
		if r.Throughput {
			sense = "throughput"
		}
		rounds := "one"
		if r.Low != 0 || r.High != 0 {
			rounds = fmt.Sprintf("%.2f–%.2f×", r.Low, r.High)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f× (%s) | %s | %s | %s |\n", r.Name, r.Ours, r.Base, r.Ratio, sense, rounds, r.target(), r.Met())
	}
	return b.String()
}

// Markers delimit the generated table in docs/performance.md.
const (
	MarkBegin = "<!-- bench-compare:begin (generated by make bench-compare; do not edit) -->"
	MarkEnd   = "<!-- bench-compare:end -->"
)

// WriteInto replaces the text between the markers of file with table.
func WriteInto(file, table string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	i, j := bytes.Index(b, []byte(MarkBegin)), bytes.Index(b, []byte(MarkEnd))
	if i < 0 || j < i {
		return fmt.Errorf("benchcompare: %s has no %q … %q section", file, MarkBegin, MarkEnd)
	}
	out := append([]byte{}, b[:i+len(MarkBegin)]...)
	out = append(out, "\n"+table+"\n"...)
	out = append(out, b[j:]...)
	return os.WriteFile(file, out, 0o644) //nolint:gosec // documentation in the repository.
}
