package benchcompare

import (
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/tools/loadgen"
)

// TestAGoalIsMetInItsWorstRound: a row's ratio is of each side's best
// round, but the goal is met only when every round meets it — the least
// throughput ratio, the greatest cost ratio — and the table states the
// spread beside the ratio.
func TestAGoalIsMetInItsWorstRound(t *testing.T) {
	round := func(perSecond float64, p99 time.Duration, cpu time.Duration) Round {
		return Round{Result: loadgen.Result{Requests: int(perSecond), Elapsed: time.Second, P99: p99}, CPUPerRequest: cpu}
	}
	ours := Load{Rounds: []Round{round(1000, 2*time.Millisecond, 40*time.Microsecond), round(900, 3*time.Millisecond, 60*time.Microsecond)}}
	base := Load{Rounds: []Round{round(1000, 2*time.Millisecond, 100*time.Microsecond), round(1000, 2*time.Millisecond, 100*time.Microsecond)}}
	tput := loadSpread(Row{Ratio: 1, Throughput: true, Target: 1}, ours, base, perSecond)
	if tput.Low != 0.9 || tput.High != 1 || tput.Worst() != 0.9 || tput.Met() != "**no**" {
		t.Errorf("throughput: %+v, worst %v, met %s; want 0.9–1, not met", tput, tput.Worst(), tput.Met())
	}
	cost := loadSpread(Row{Ratio: 0.4, Target: 0.5}, ours, base, cpuPer)
	if cost.Low != 0.4 || cost.High != 0.6 || cost.Met() != "**no**" {
		t.Errorf("cpu: %+v, met %s; want 0.4–0.6, not met (the second round is over 0.5)", cost, cost.Met())
	}
	lat := loadSpread(Row{Ratio: 1, Target: 1.5}, ours, base, p99)
	if lat.High != 1.5 || lat.Met() != "yes" {
		t.Errorf("p99: %+v, met %s; want met at 1.5 in the worst round", lat, lat.Met())
	}
	if one := (Row{Ratio: 0.4, Target: 0.5}); one.Worst() != 0.4 || one.Met() != "yes" {
		t.Errorf("a row of one round: worst %v, met %s", one.Worst(), one.Met())
	}
	md := Markdown([]Row{cost}, "about")
	if !strings.Contains(md, "| 0.40× (cost) | 0.40–0.60× | ≤ 0.5× | **no** |") {
		t.Errorf("the table does not state the spread and the worst round's verdict:\n%s", md)
	}
}
