package vmafx_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
)

// TestClaimedOnceEndedOnce runs three real vmafx-node binaries against the
// controller (SQLite) through a proxy while the controller is SIGKILLed
// and started again on its datastore, and while the proxy lets requests
// through, swallows their answers and breaks the connections — claims and
// final reports committed, their nodes told Unavailable. The nodes retry a
// claim with its claim_key and a final report under its lease, so every
// job is claimed once (attempts 1: no claim left to expire behind a lost
// answer, the lease is longer than the test) and ends once (each node
// counts the reports it had accepted: they add up to the jobs).
func TestClaimedOnceEndedOnce(t *testing.T) {
	const jobs, nodes = 200, 3
	w := newWorld(t)
	// A lease longer than the whole run: a claim whose answer was lost and
	// that no retry found again would hold its job to the end (attempts 2,
	// or never finished).
	_ = w.ctl.Stop()
	var ctls []*e2e.Process
	start := func() string {
		p, addr := w.startReplica("--lease", "5m")
		ctls = append(ctls, p)
		w.ctl = p
		return addr
	}
	direct := start()
	proxy, err := faults.NewProxy(direct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	w.addr = proxy.Addr() // the nodes' and the clients' way in

	clips := w.clipDir("tenant-a")
	if err := clipgen.WriteFile(filepath.Join(clips, "ref.y4m"), clipgen.Spec{Width: 160, Height: 96, Frames: 40}); err != nil {
		t.Fatal(err)
	}
	if err := clipgen.WriteFile(filepath.Join(clips, "dist.y4m"), clipgen.Spec{Width: 160, Height: 96, Frames: 40, Noise: 8, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	submitter := w.clientOf(direct, w.mint("tenant-a", "ci-a", time.Now(), "vmafx:submitter", "vmafx:reader"))
	want := map[string]bool{}
	for range jobs {
		r, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "dist.y4m", Metrics: []string{"psnr"}}})
		if err != nil {
			t.Fatal(err)
		}
		want[r.GetJob().GetId()] = true
	}
	var procs []*e2e.Process
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		tokFile := filepath.Join(w.dir, name+".token")
		write(t, tokFile, w.mint("tenant-a", name, time.Now(), "vmafx:node"))
		procs = append(procs, w.node(name, tokFile))
	}

	cuts, kills := 0, 0
	cutAfterCommit := func() {
		proxy.HoldReplies(true)
		time.Sleep(250 * time.Millisecond)
		proxy.Cut()
		proxy.HoldReplies(false)
		if err := proxy.Mend(); err != nil {
			t.Fatal(err)
		}
		cuts++
	}
	kill := func() {
		if err := w.ctl.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-w.ctl.Done()
		kills++
		proxy.Retarget(start())
	}
	// Faults until every job has ended, alternating, a few hundred
	// milliseconds apart (jobs are claimed and reported meanwhile).
	reader := w.client(w.mint("tenant-a", "dash-a", time.Now(), "vmafx:reader")) // through the proxy: it reconnects
	ended := func() int {
		n := 0
		for _, st := range []vmafxv1.JobState{vmafxv1.JobState_JOB_STATE_SUCCEEDED, vmafxv1.JobState_JOB_STATE_FAILED} {
			r, err := reader.ListJobs(ctx, &vmafxv1.ListJobsRequest{State: st, PageSize: jobs + 1})
			if err != nil {
				return -1 // the controller is restarting
			}
			n += len(r.GetJobs())
		}
		return n
	}
	// Until a claim and a final report have each been retried after a lost
	// answer (or 60 faults), then until every job has ended.
	count := func(ps []*e2e.Process, msg string) int {
		n := 0
		for _, p := range ps {
			n += strings.Count(p.Output(), `"msg":"`+msg+`"`)
		}
		return n
	}
	exercised := func() bool {
		return count(ctls, claimReplayed) > 0 && count(ctls, reportReplayed) > 0
	}
	for deadline := time.Now().Add(90 * time.Second); ; {
		if !exercised() && cuts+kills < 60 {
			if (cuts+kills)%2 == 0 {
				cutAfterCommit()
			} else {
				kill()
			}
		}
		time.Sleep(150 * time.Millisecond)
		if n := ended(); n == jobs {
			break
		}
		if time.Now().After(deadline) {
			for id := range want {
				if g, err := reader.GetJob(ctx, &vmafxv1.GetJobRequest{Id: id}); err == nil && g.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED {
					t.Logf("job %s: %s on %q after %d claims", id, g.GetJob().GetState(), g.GetJob().GetNode(), g.GetJob().GetAttempts())
					for _, p := range append(procs, ctls...) {
						for _, l := range strings.Split(p.Output(), "\n") {
							if strings.Contains(l, id) {
								t.Log(l)
							}
						}
					}
				}
			}
			t.Fatalf("%d of %d jobs ended in 90 s", ended(), jobs)
		}
	}

	// Every job: SUCCEEDED on its first claim.
	notOnce := 0
	for id := range want {
		g, err := reader.GetJob(ctx, &vmafxv1.GetJobRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if j := g.GetJob(); j.GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempts() != 1 {
			notOnce++
			t.Errorf("job %s: %s after %d claims (%s); want SUCCEEDED on its first", id, j.GetState(), j.GetAttempts(), j.GetError())
		}
	}
	// Every node's count of accepted reports, and what went otherwise —
	// once each has heard back (a report whose answer was lost is retried
	// a second later, after the job has ended in the datastore).
	var outcomes map[string]float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		outcomes = map[string]float64{}
		sum := 0.0
		for _, p := range procs {
			for k, v := range nodeOutcomes(t, p) {
				outcomes[k] += v
				sum += v
			}
		}
		if sum >= jobs || time.Now().After(deadline) {
			break
		}
	}
	// The controllers' logs: the retries they answered as the first time.
	claimReplays, reportReplays := count(ctls, claimReplayed), count(ctls, reportReplayed)
	t.Logf("%d jobs, %d nodes; %d cuts after the commit, %d SIGKILLs and restarts of the controller: %d succeeded on their first claim; nodes' outcomes %v; "+
		"%d final reports sent again, the controller answered %d claims and %d final reports again", jobs, nodes, cuts, kills, jobs-notOnce, outcomes,
		count(procs, reportRetried), claimReplays, reportReplays)
	if outcomes["succeeded"] != jobs || outcomes["unreported"] != 0 || outcomes["given_back"] != 0 || outcomes["stopped"] != 0 {
		t.Errorf("the nodes' outcomes %v; want %d succeeded (each job ended once) and nothing else", outcomes, jobs)
	}
	if !exercised() {
		t.Error("no claim, or no final report, was retried after a lost answer: the faults were not exercised")
	}
}

// What the controller and the nodes log of a retry.
const (
	claimReplayed  = "controller: a retried claim holds its job"
	reportReplayed = "controller: a repeated final report changes nothing"
	reportRetried  = "node: the outcome was not acknowledged; sending it again"
)

// nodeOutcomes reads a node's vmafx_node_jobs_total by outcome.
func nodeOutcomes(t *testing.T, p *e2e.Process) map[string]float64 {
	t.Helper()
	mfs, err := scrape.Families(p.LogValue(t, "node: serving", "metrics", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range mfs["vmafx_node_jobs_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			out[l.GetValue()] += m.GetCounter().GetValue()
		}
	}
	return out
}
