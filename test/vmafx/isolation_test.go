package vmafx_test

import (
	"context"
	"encoding/base64"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
)

// TestIsolationBeyondTheAPI: the data-plane findings of an outside probe,
// each against the real controller and node binaries: poison clips (a
// FIFO, frames too large, a clip no node finishes in time), unbounded
// submissions, clips outside the tenant's directory, two pods with one
// identity, page-token arithmetic, non-finite report values, refusals that
// were not logged, and a token without the tenant claim.
func TestIsolationBeyondTheAPI(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	now := time.Now()
	submitter := w.client(w.mint("tenant-a", "ci-a", now, "vmafx:submitter", "vmafx:reader"))
	readerB := w.client(w.mint("tenant-b", "dash-b", now, "vmafx:reader", "vmafx:submitter"))
	dirA, dirB := w.clipDir("tenant-a"), w.clipDir("tenant-b")
	for _, c := range []struct{ dir, name string }{{dirA, "ref.y4m"}, {dirB, "secret.y4m"}} {
		if err := clipgen.WriteFile(filepath.Join(c.dir, c.name), clipgen.Spec{Width: 64, Height: 48, Frames: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dirA, "fifo.y4m"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dirB, "secret.y4m"), filepath.Join(dirA, "link.y4m")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirA, "huge.y4m"), []byte("YUV4MPEG2 W16384 H16384 C420jpeg\nFRAME\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(w.dir, "node-a1.token")
	write(t, tok, w.mint("tenant-a", "node-a1", now, "vmafx:node"))
	submit := func(ref, dist string, metrics ...string) string {
		t.Helper()
		sub, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: ref, Distorted: dist, Metrics: metrics}})
		if err != nil {
			t.Fatal(err)
		}
		return sub.GetJob().GetId()
	}
	failedWith := func(id, reason string) *vmafxv1.Job {
		t.Helper()
		j := w.wait(submitter, id, func(j *vmafxv1.Job) bool { return j.GetState() == vmafxv1.JobState_JOB_STATE_FAILED })
		if j.GetReason() != reason {
			t.Errorf("job %s: reason %q (%s); want %s", id, j.GetReason(), j.GetError(), reason)
		}
		return j
	}

	t.Run("submissions over a limit are refused naming the field and the limit", func(t *testing.T) {
		for _, c := range []struct {
			name string
			spec *vmafxv1.JobSpec
			want string
		}{
			{"a 1 MB path", &vmafxv1.JobSpec{Reference: strings.Repeat("a", 1<<20), Distorted: "ref.y4m", Metrics: []string{"psnr"}}, "spec.reference: 1048576 bytes; at most 1024"},
			{"../", &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "../tenant-b/secret.y4m", Metrics: []string{"psnr"}}, `spec.distorted: a ".." element`},
			{"absolute", &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: filepath.Join(dirB, "secret.y4m"), Metrics: []string{"psnr"}}, "spec.distorted: an absolute path"},
			{"file:// URI", &vmafxv1.JobSpec{Reference: "file://" + filepath.Join(dirB, "secret.y4m"), Distorted: "ref.y4m", Metrics: []string{"psnr"}}, "spec.reference: a URL"},
			{"160,000 metrics", &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "ref.y4m", Metrics: repeat("psnr", 160_000)}, "spec.metrics: 160000 listed; at most 2"},
			{"ssim twice", &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "ref.y4m", Metrics: []string{"ssim", "ssim"}}, `spec.metrics[1]: "ssim" is listed twice`},
		} {
			_, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: c.spec})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) || len(status.Convert(err).Message()) > 300 {
				t.Errorf("%s: %v; want InvalidArgument %q, the input not repeated", c.name, trim(err), c.want)
			}
		}
	})

	t.Run("the largest submissions keep the controller's memory bounded", func(t *testing.T) {
		// The probe: 100 jobs with two 1.9 MB paths, then ListJobs(500),
		// took the controller from 88 to 1,903 MiB. Now a path is at most
		// 1 KiB and a page at most 1 MiB.
		before := w.metric(t, "process_resident_memory_bytes")
		long := strings.Repeat("d/", 511) + "x" // 1023 bytes
		for range 100 {
			submit(long, long, "psnr", "ssim")
		}
		l, err := submitter.ListJobs(ctx, &vmafxv1.ListJobsRequest{PageSize: 500})
		if err != nil || len(l.GetJobs()) != 100 {
			t.Fatalf("ListJobs(500): %d jobs, %v", len(l.GetJobs()), err)
		}
		start := time.Now()
		if _, err := readerB.ListJobs(ctx, &vmafxv1.ListJobsRequest{}); err != nil {
			t.Fatal(err)
		}
		tookB := time.Since(start)
		after := w.metric(t, "process_resident_memory_bytes")
		t.Logf("controller resident memory: %.1f MiB before, %.1f MiB after 100 jobs of two 1 KiB paths and ListJobs(500); tenant B's ListJobs meanwhile %s",
			before/(1<<20), after/(1<<20), tookB.Round(time.Millisecond))
		if after-before > 64<<20 {
			t.Errorf("the controller grew by %.1f MiB", (after-before)/(1<<20))
		}
		for _, j := range l.GetJobs() {
			if _, err := submitter.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: j.GetId()}); err != nil {
				t.Fatal(err)
			}
		}
	})

	n1 := w.node("node-a1", tok, "--shutdown-timeout", "3s")
	defer func() { _ = n1.Stop() }()

	t.Run("a FIFO, a directory, another tenant's clip and a missing one read alike; the node goes on", func(t *testing.T) {
		var msgs []string
		if err := os.Mkdir(filepath.Join(dirA, "dir.y4m"), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, dist := range []string{"fifo.y4m", "dir.y4m", "link.y4m", "none.y4m"} {
			j := failedWith(submit("ref.y4m", dist, "psnr"), "clip_unavailable")
			msgs = append(msgs, strings.Replace(j.GetError(), strconv.Quote(dist), `"X"`, 1))
		}
		for _, m := range msgs[1:] {
			if m != msgs[0] {
				t.Errorf("the errors tell the cases apart:\n%s", strings.Join(msgs, "\n"))
				break
			}
		}
		// The node was not pinned: a good job after them succeeds.
		if j := w.wait(submitter, submit("ref.y4m", "ref.y4m", "psnr"), succeeded); j.GetScores()[0].GetMean() != 100 {
			t.Fatalf("after the FIFO: %v", j)
		}
	})

	t.Run("frames of 16384x16384 fail frame_too_large before any frame is read", func(t *testing.T) {
		j := failedWith(submit("huge.y4m", "huge.y4m", "ssim"), "frame_too_large")
		if !strings.Contains(j.GetError(), "--max-frame-pixels") {
			t.Errorf("error %q", j.GetError())
		}
	})

	t.Run("a clip that outlasts the lease is kept by its progress reports", func(t *testing.T) {
		// 1080p black frames: about 5 s of measuring against a 2 s lease.
		if err := clipgen.WriteSparse(filepath.Join(dirA, "four.y4m"), 1920, 1080, 400); err != nil {
			t.Fatal(err)
		}
		j := w.wait(submitter, submit("four.y4m", "four.y4m", "psnr", "ssim"), succeeded)
		if j.GetAttempts() != 1 || j.GetScores()[0].GetFrames() != 400 {
			t.Fatalf("attempts %d, frames %d", j.GetAttempts(), j.GetScores()[0].GetFrames())
		}
	})

	if err := clipgen.WriteSparse(filepath.Join(dirA, "long.y4m"), 1920, 1080, 5000); err != nil {
		t.Fatal(err)
	}

	t.Run("SIGTERM mid-job: the node gives the job back and exits", func(t *testing.T) {
		id := submit("long.y4m", "long.y4m", "ssim")
		w.wait(submitter, id, func(j *vmafxv1.Job) bool {
			return j.GetState() == vmafxv1.JobState_JOB_STATE_RUNNING && j.GetProgress() > 0
		})
		if err := n1.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, ok := n1.Exited(30 * time.Second); !ok || code != 0 {
			t.Fatalf("the node did not exit cleanly after SIGTERM: exited %v, code %d", ok, code)
		}
		j, err := submitter.GetJob(ctx, &vmafxv1.GetJobRequest{Id: id})
		if err != nil || j.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_PENDING || j.GetJob().GetError() != "given back by node-a1: the node is stopping" {
			t.Fatalf("after SIGTERM: %v %v", j.GetJob(), err)
		}
		if _, err := submitter.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("two pods with one identity: the late report of the pod that lost its lease is refused", func(t *testing.T) {
		id := submit("long.y4m", "long.y4m", "ssim")
		pod1 := w.node("vmafx-node-x1", tok)
		defer func() { _ = pod1.Stop() }()
		w.wait(submitter, id, func(j *vmafxv1.Job) bool { return j.GetNode() == "node-a1/vmafx-node-x1" && j.GetProgress() > 0 })
		if err := pod1.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		w.wait(submitter, id, func(j *vmafxv1.Job) bool { return j.GetState() == vmafxv1.JobState_JOB_STATE_PENDING })
		pod2 := w.node("vmafx-node-x2", tok)
		defer func() { _ = pod2.Stop() }()
		w.wait(submitter, id, func(j *vmafxv1.Job) bool {
			return j.GetNode() == "node-a1/vmafx-node-x2" && j.GetState() == vmafxv1.JobState_JOB_STATE_RUNNING
		})
		if err := pod1.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if got := pod1.LogValue(t, "node: stopping the job: the controller refused its progress report", "job", 30*time.Second); got != id {
			t.Fatalf("pod 1 stopped %s", got)
		}
		j, _ := submitter.GetJob(ctx, &vmafxv1.GetJobRequest{Id: id})
		if j.GetJob().GetNode() != "node-a1/vmafx-node-x2" || j.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_RUNNING || j.GetJob().GetAttempts() != 2 {
			t.Fatalf("pod 1's late report changed the job: %v", j.GetJob())
		}
		if _, err := submitter.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		pod2.LogValue(t, "node: stopping the job: the controller refused its progress report", "job", 30*time.Second)
	})

	t.Run("a poison job fails attempts_exhausted while the jobs behind it finish", func(t *testing.T) {
		poison := submit("long.y4m", "long.y4m", "ssim")
		behind := []string{submit("ref.y4m", "ref.y4m", "psnr"), submit("ref.y4m", "ref.y4m", "ssim")}
		impatient := w.node("node-impatient", tok, "--max-job-duration", "700ms")
		defer func() { _ = impatient.Stop() }()
		j := failedWith(poison, "attempts_exhausted")
		if j.GetAttempts() != 3 || !strings.Contains(j.GetError(), "outlasted --max-job-duration 700ms") {
			t.Errorf("poison: attempts %d, error %q", j.GetAttempts(), j.GetError())
		}
		for _, id := range behind {
			w.wait(submitter, id, succeeded)
		}
	})

	t.Run("page tokens are opaque and tell nothing of other tenants", func(t *testing.T) {
		subB := w.client(w.mint("tenant-b", "ci-b", now, "vmafx:submitter"))
		var idsB []string
		for i := range 3 {
			if i == 2 {
				for range 5 { // tenant A submits between B's second and third
					submit("ref.y4m", "ref.y4m", "psnr")
				}
			}
			sub, err := subB.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "secret.y4m", Distorted: "secret.y4m", Metrics: []string{"psnr"}}})
			if err != nil {
				t.Fatal(err)
			}
			idsB = append(idsB, sub.GetJob().GetId())
		}
		var tokens []string
		page := ""
		for {
			l, err := readerB.ListJobs(ctx, &vmafxv1.ListJobsRequest{PageSize: 1, PageToken: page})
			if err != nil {
				t.Fatal(err)
			}
			if page = l.GetNextPageToken(); page == "" {
				break
			}
			tokens = append(tokens, page)
		}
		if len(tokens) != 2 {
			t.Fatalf("tokens %v", tokens)
		}
		// Before: the tokens were global sequence numbers, 6 apart across
		// A's five submissions and 1 apart otherwise. Now each names one of
		// B's own jobs and holds nothing else.
		for i, tk := range tokens {
			if _, err := strconv.ParseInt(tk, 10, 64); err == nil {
				t.Errorf("token %q is a number", tk)
			}
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tk, "c1."))
			if err != nil || string(raw) != idsB[2-i] {
				t.Errorf("token %q carries %q; want B's own job %s only", tk, raw, idsB[2-i])
			}
		}
		// Arithmetic on a token, or A's token, is refused alike.
		aPage, err := submitter.ListJobs(ctx, &vmafxv1.ListJobsRequest{PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"7", aPage.GetNextPageToken(), "c1." + base64.RawURLEncoding.EncodeToString([]byte("no-such-job"))} {
			if _, err := readerB.ListJobs(ctx, &vmafxv1.ListJobsRequest{PageToken: bad}); status.Code(err) != codes.InvalidArgument ||
				status.Convert(err).Message() != "page_token: not a token this tenant was given by ListJobs" {
				t.Errorf("token %q: %v", bad, err)
			}
		}
	})

	t.Run("non-finite and out-of-range report values are InvalidArgument naming the field", func(t *testing.T) {
		id := submit("ref.y4m", "ref.y4m", "psnr")
		probe := w.client(w.mint("tenant-a", "probe-node", now, "vmafx:node"))
		// No node runs now (each subtest stopped its own); the pending jobs
		// queued before this one are claimed and left to their leases.
		var claim *vmafxv1.ClaimJobResponse
		for deadline := time.Now().Add(30 * time.Second); claim == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			c, err := probe.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
			if err == nil && c.GetJob().GetId() == id {
				claim = c
			}
		}
		if claim == nil {
			t.Fatal("the probe never claimed the job")
		}
		for _, r := range []struct {
			p     float64
			field string
		}{{math.NaN(), "progress"}, {math.Inf(1), "progress"}, {-5, "progress"}} {
			_, err := probe.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: id, LeaseId: claim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_RUNNING, Progress: r.p})
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), r.field) {
				t.Errorf("progress %v: %v", r.p, err)
			}
		}
		_, err := probe.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: id, LeaseId: claim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED,
			Scores: []*vmafxv1.Score{{Metric: "psnr", Mean: math.NaN(), Min: 1, Frames: 4}}})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "scores[0].mean") {
			t.Errorf("NaN score: %v", err)
		}
	})

	t.Run("a token without the tenant claim its issuer requires is refused; every refusal is logged", func(t *testing.T) {
		// tenant-c's claim validation rule: has(claims.tenant) && claims.tenant == "tenant-c".
		c := w.client(w.mint("tenant-c", "ci-c", now, "vmafx:reader"))
		_, err := c.ListJobs(ctx, &vmafxv1.ListJobsRequest{})
		if status.Code(err) != codes.Unauthenticated || reason(err) != "token_invalid" {
			t.Errorf("no tenant claim: %v (reason %s)", err, reason(err))
		}
		out := w.ctl.Output()
		for _, want := range []string{`"reason":"invalid_argument"`, `"reason":"job_conflict"`, `"tenant":"tenant-a"`, `"caller":"ci-a"`, `"caller":"dash-b"`} {
			if !strings.Contains(out, want) {
				t.Errorf("no refusal logged with %s", want)
			}
		}
	})
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func trim(err error) string {
	s := status.Convert(err).Message()
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
