package vmafx_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
)

// claim is one ClaimJob answer a node received.
type claim struct {
	node       string
	at, leased time.Time // when it was answered; the lease's end it names
}

// TestControllerReplicas runs three vmafx-controller binaries on one real
// PostgreSQL database behind no balancer: twelve nodes (four per replica)
// claim and complete 150 jobs concurrently, and one replica is killed
// (SIGKILL) a third of the way through; that one read its database URL
// from a file, as from a mounted Secret (--datastore-url-file). Its nodes move to the survivors;
// a claim it committed but never answered is requeued when its lease (2 s)
// expires. At the end every job has succeeded (none lost), and no job was
// ever handed to a second node while a first one's lease still ran (no
// double claim).
func TestControllerReplicas(t *testing.T) {
	const jobs, nodesPerReplica = 150, 4
	pg := pgtest.Start(t)
	w := newWorldOn(t, pg.NewDatabase(t))
	_, a2 := w.startReplica()
	// The third reads its URL from a file, as from a mounted Secret.
	urlFile := filepath.Join(w.dir, "datastore-url")
	write(t, urlFile, w.datadir+"\n")
	p3, a3 := w.startReplica("--datastore", "/nonexistent/ignored.db", "--datastore-url-file", urlFile)
	addrs := []string{w.addr, a2, a3}

	ctx := context.Background()
	submitter := w.client(w.mint("tenant-a", "ci-a", time.Now(), "vmafx:submitter", "vmafx:reader"))
	want := map[string]bool{}
	for i := range jobs {
		r, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: fmt.Sprintf("dist/%d.y4m", i), Metrics: []string{"psnr"}}})
		if err != nil {
			t.Fatal(err)
		}
		want[r.GetJob().GetId()] = true
	}

	var (
		mu       sync.Mutex
		claims   = map[string][]claim{}
		reported = map[string]int{}
		claimed  atomic.Int64
		killed   atomic.Bool
		done     atomic.Bool // every job succeeded, or time ran out
		wg       sync.WaitGroup
	)
	dead := a3 // the replica killed below
	for r := range addrs {
		for n := range nodesPerReplica {
			node := fmt.Sprintf("node-%d-%d", r, n)
			tok := w.mint("tenant-a", node, time.Now(), "vmafx:node")
			wg.Go(func() {
				at := r
				c := w.clientOf(addrs[at], tok)
				for !done.Load() {
					if killed.Load() && addrs[at] == dead {
						at = (at + 1) % len(addrs)
						c = w.clientOf(addrs[at], tok)
					}
					resp, err := c.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
					if err != nil {
						if status.Code(err) != codes.Unavailable {
							t.Errorf("%s: claim: %v", node, err)
							return
						}
						time.Sleep(20 * time.Millisecond)
						continue
					}
					j := resp.GetJob()
					if j == nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					mu.Lock()
					claims[j.GetId()] = append(claims[j.GetId()], claim{node: node, at: time.Now(), leased: j.GetLeaseExpiresAt().AsTime()})
					mu.Unlock()
					claimed.Add(1)
					_, err = c.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: j.GetId(), LeaseId: resp.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED,
						Scores: []*vmafxv1.Score{{Metric: "psnr", Mean: 40, Min: 39, Frames: 1}}})
					switch status.Code(err) {
					case codes.OK:
						mu.Lock()
						reported[j.GetId()]++
						mu.Unlock()
					case codes.Unavailable, codes.FailedPrecondition:
						// The replica died under the report, or the lease
						// went to another node meanwhile: the job is requeued
						// or someone else's now.
					default:
						t.Errorf("%s: report %s: %v", node, j.GetId(), err)
					}
				}
			})
		}
	}
	for claimed.Load() < jobs/3 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := p3.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	t.Logf("replica 3 killed after %d claims", claimed.Load())
	// The nodes work until every job has succeeded: the last ones are the
	// claims the dead replica committed and never answered, requeued when
	// their lease runs out.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		r, err := submitter.ListJobs(ctx, &vmafxv1.ListJobsRequest{State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, PageSize: jobs + 1})
		if err == nil && len(r.GetJobs()) == jobs {
			break
		}
	}
	done.Store(true)
	wg.Wait()

	lost, double, again := 0, 0, 0
	for id := range want {
		g, err := submitter.GetJob(ctx, &vmafxv1.GetJobRequest{Id: id})
		if err != nil || g.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED {
			lost++
			t.Errorf("job %s: %v %v", id, g.GetJob().GetState(), err)
		}
		cs := claims[id]
		slices.SortFunc(cs, func(a, b claim) int { return a.at.Compare(b.at) })
		for i := 1; i < len(cs); i++ {
			again++
			// Clocks: the controller's lease end against this process's
			// clock, on one machine.
			if cs[i].at.Before(cs[i-1].leased) {
				double++
				t.Errorf("job %s handed to %s at %s while %s's lease ran to %s", id, cs[i].node, cs[i].at.Format(time.StampMilli), cs[i-1].node, cs[i-1].leased.Format(time.StampMilli))
			}
		}
		if reported[id] > 1 {
			double++
			t.Errorf("job %s reported done %d times", id, reported[id])
		}
	}
	t.Logf("%d jobs over 3 replicas (one killed) and %d nodes: %d claims answered, %d claimed again after a lease ran out, %d double claims, %d lost",
		jobs, len(addrs)*nodesPerReplica, claimed.Load(), again, double, lost)
	if lost != 0 || double != 0 {
		t.Fatalf("%d lost, %d double claims", lost, double)
	}
}
