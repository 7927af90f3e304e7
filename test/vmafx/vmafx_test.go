// Package vmafx_test runs the real vmafx-controller and vmafx-node binaries
// over TLS with two tenants, each with its own identity provider, and checks
// the seed's consequences as rows: scores that match ffmpeg's, tenant B not
// seeing tenant A's job, a reader unable to submit, an expired token file
// reported and never sent and a refreshed one resuming work, a node killed
// mid-job replaced after its lease, and a controller restart losing nothing.
package vmafx_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
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
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
)

var bins map[string]string

func TestMain(m *testing.M) {
	e2e.Main(m, &bins, []string{"cmd/vmafx-controller", "cmd/vmafx-node"})
}

type world struct {
	t           *testing.T
	dir         string
	idp         map[string]*devissuer.Issuer
	ca          *pki.CA
	caFile      string
	authnConfig string
	ctl         *e2e.Process
	addr        string
	datadir     string
	cert        string
	key         string
	ctlFlags    []string
}

func newWorld(t *testing.T) *world { return newWorldOn(t, "") }

// newWorldOn is newWorld with the controller's datastore: an SQLite file
// in the world's directory when datastore is "".
func newWorldOn(t *testing.T, datastore string) *world { return newWorldWith(t, datastore) }

// newWorldWith is newWorldOn, the controller started with extra flags.
func newWorldWith(t *testing.T, datastore string, ctlFlags ...string) *world {
	w := &world{t: t, dir: t.TempDir(), idp: map[string]*devissuer.Issuer{}, ctlFlags: ctlFlags}
	// The tenants' identity providers, as an AuthenticationConfiguration
	// (each issuer its constant tenant, scp its roles).
	var issuers oidc.Config
	for _, name := range []string{"tenant-a", "tenant-b", "tenant-c"} {
		iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp." + name + ".example"})
		w.idp[name] = iss
		ic := oidc.IssuerConfig{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(), Audiences: []string{"vmafx-controller"}, Tenant: name, RolesClaim: "scp"}
		if name == "tenant-c" {
			ic.TenantClaim = "tenant" // its tokens must state the tenant
		}
		issuers.Issuers = append(issuers.Issuers, ic)
		// One clip volume for every tenant, a directory each (as on a
		// node's disk).
		if err := os.MkdirAll(filepath.Join(w.dir, "clips", name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	doc, _, err := authconfig.Convert(issuers)
	if err != nil {
		t.Fatal(err)
	}
	w.authnConfig = filepath.Join(w.dir, "authn.yaml")
	write(t, w.authnConfig, string(doc))
	if w.ca, err = pki.NewCA("vmafx e2e"); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, _ := w.ca.Issue("127.0.0.1", "127.0.0.1")
	w.cert, w.key = filepath.Join(w.dir, "tls.crt"), filepath.Join(w.dir, "tls.key")
	write(t, w.cert, string(certPEM))
	write(t, w.key, string(keyPEM))
	if w.caFile, err = w.ca.WriteCA(filepath.Join(w.dir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	w.datadir = datastore
	if w.datadir == "" {
		w.datadir = filepath.Join(w.dir, "controller.db")
	}
	w.startController()
	return w
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (w *world) startController() {
	w.ctl, w.addr = w.startReplica(w.ctlFlags...)
}

// startReplica starts a controller on the world's datastore (with extra
// flags) and returns it with its address.
func (w *world) startReplica(extra ...string) (*e2e.Process, string) {
	p := e2e.Start(w.t, bins["vmafx-controller"], append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--tls-cert-file", w.cert, "--tls-key-file", w.key, "--caller-authentication-config", w.authnConfig, "--datastore", w.datadir, "--lease", "2s"}, extra...))
	return p, p.LogValue(w.t, "controller: serving", "address", 60*time.Second)
}

// mint is a token of tenant for subject with roles, valid for an hour from
// issued.
func (w *world) mint(tenant, subject string, issued time.Time, roles ...string) string {
	tok, err := w.idp[tenant].MintIdentity(devissuer.IdentityRequest{Subject: subject, Audiences: []string{"vmafx-controller"},
		Lifetime: time.Hour, IssuedAt: issued, Claims: map[string]any{"scp": strings.Join(roles, " ")}})
	if err != nil {
		w.t.Fatal(err)
	}
	return tok.Token
}

// client is an operator-side client with a token.
func (w *world) client(tok string) vmafxv1.JobServiceClient { return w.clientOf(w.addr, tok) }

// clientOf is a client of the controller at addr.
func (w *world) clientOf(addr, tok string) vmafxv1.JobServiceClient {
	conn, err := loopback.DialTLS(addr, w.ca.Pool(), tok)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = conn.Close() })
	return vmafxv1.NewJobServiceClient(conn)
}

// node starts a node binary for tenant A whose token file is tokenFile,
// named name (--node-name), its clip root the world's clips directory.
func (w *world) node(name, tokenFile string, extra ...string) *e2e.Process {
	cfg := filepath.Join(w.dir, name+".yaml")
	write(w.t, cfg, fmt.Sprintf("controller:\n  address: %s\n  tls: true\n  ca_file: %s\n  server_name: 127.0.0.1\n  token_file: %s\n", w.addr, w.caFile, tokenFile))
	return e2e.Start(w.t, bins["vmafx-node"], append([]string{"--config", cfg, "--poll", "100ms", "--report-every", "500ms",
		"--clip-root", filepath.Join(w.dir, "clips"), "--node-name", name, "--metrics-listen", "127.0.0.1:0"}, extra...))
}

// clipDir is tenant's directory on the clip volume.
func (w *world) clipDir(tenant string) string { return filepath.Join(w.dir, "clips", tenant) }

func (w *world) wait(c vmafxv1.JobServiceClient, id string, done func(*vmafxv1.Job) bool) *vmafxv1.Job {
	w.t.Helper()
	var last *vmafxv1.Job
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		g, err := c.GetJob(context.Background(), &vmafxv1.GetJobRequest{Id: id})
		if err == nil {
			last = g.GetJob()
			if done(last) {
				return last
			}
		}
	}
	w.t.Fatalf("job %s never got there; last %+v", id, last)
	return nil
}

func succeeded(j *vmafxv1.Job) bool { return j.GetState() == vmafxv1.JobState_JOB_STATE_SUCCEEDED }

// ffmpegMeans runs ffmpeg's filter and returns the mean and minimum of its
// per-frame key.
func ffmpegMeans(t *testing.T, filter, key, reference, distorted string) (float64, float64) {
	t.Helper()
	bin, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatal("ffmpeg is the reference and is not installed: make test installs it")
	}
	// Not t.TempDir(): a subtest's name (commas, quotes) would break the
	// filter graph's syntax.
	tmp, err := os.MkdirTemp("", "ffmpeg-stats-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	stats := filepath.Join(tmp, filter+".log")
	if out, err := exec.Command(bin, "-hide_banner", "-loglevel", "error", "-i", distorted, "-i", reference,
		"-lavfi", fmt.Sprintf("[0:v][1:v]%s=stats_file=%s", filter, stats), "-f", "null", "-").CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, out)
	}
	f, err := os.Open(stats)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, lo, n := 0.0, math.Inf(1), 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, field := range strings.Fields(sc.Text()) {
			if v, ok := strings.CutPrefix(field, key+":"); ok {
				x, _ := strconv.ParseFloat(v, 64)
				sum, lo, n = sum+x, math.Min(lo, x), n+1
			}
		}
	}
	return sum / float64(n), lo
}

func TestVmafx(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	now := time.Now()
	submitter := w.client(w.mint("tenant-a", "ci-a", now, "vmafx:submitter", "vmafx:reader"))
	readerA := w.client(w.mint("tenant-a", "dash-a", now, "vmafx:reader"))
	readerB := w.client(w.mint("tenant-b", "dash-b", now, "vmafx:reader"))
	clips := w.clipDir("tenant-a")
	ref, dist := filepath.Join(clips, "ref.y4m"), filepath.Join(clips, "dist.y4m")
	if err := clipgen.WriteFile(ref, clipgen.Spec{Width: 160, Height: 96, Frames: 12}); err != nil {
		t.Fatal(err)
	}
	if err := clipgen.WriteFile(dist, clipgen.Spec{Width: 160, Height: 96, Frames: 12, Noise: 10, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	spec := &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "dist.y4m", Metrics: []string{"psnr", "ssim"}}

	t.Run("submit, claim, measure, succeed with ffmpeg's figures", func(t *testing.T) {
		tokFile := filepath.Join(w.dir, "node-a1.token")
		write(t, tokFile, w.mint("tenant-a", "node-a1", now, "vmafx:node"))
		n1 := w.node("node-a1", tokFile)
		defer func() { _ = n1.Stop() }()
		sub, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		j := w.wait(readerA, sub.GetJob().GetId(), succeeded)
		if j.GetNode() != "node-a1" || len(j.GetScores()) != 2 {
			t.Fatalf("job %+v", j)
		}
		if m := w.metrics(t); !strings.Contains(m, `vmafx_controller_jobs{state="succeeded"} 1`) ||
			!strings.Contains(m, `vmafx_controller_rpcs_total{code="OK",method="/vmafx.v1.JobService/SubmitJob"} 1`) {
			t.Errorf("metrics:\n%s", m)
		}
		for i, c := range []struct {
			filter, key string
			tol         float64
		}{{"psnr", "psnr_y", 0.01}, {"ssim", "Y", 0.001}} {
			mean, lo := ffmpegMeans(t, c.filter, c.key, ref, dist)
			s := j.GetScores()[i]
			if s.GetFrames() != 12 || math.Abs(s.GetMean()-mean) > c.tol || math.Abs(s.GetMin()-lo) > c.tol {
				t.Errorf("%s: mean %.5f min %.5f over %d frames; ffmpeg %.5f %.5f", c.filter, s.GetMean(), s.GetMin(), s.GetFrames(), mean, lo)
			}
		}
		// Tenant B cannot see it: NotFound, as a job that does not exist.
		_, err = readerB.GetJob(ctx, &vmafxv1.GetJobRequest{Id: j.GetId()})
		_, none := readerB.GetJob(ctx, &vmafxv1.GetJobRequest{Id: "00000000-0000-0000-0000-000000000000"})
		if status.Code(err) != codes.NotFound || status.Convert(err).Message() != status.Convert(none).Message() {
			t.Errorf("tenant B: %v (a missing job: %v)", err, none)
		}
		// Clips that do not match fail the job, naming both.
		wide := filepath.Join(clips, "wide.y4m")
		if err := clipgen.WriteFile(wide, clipgen.Spec{Width: 176, Height: 96, Frames: 12}); err != nil {
			t.Fatal(err)
		}
		bad, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "wide.y4m", Metrics: []string{"psnr"}}})
		if err != nil {
			t.Fatal(err)
		}
		failed := w.wait(readerA, bad.GetJob().GetId(), func(j *vmafxv1.Job) bool { return j.GetState() == vmafxv1.JobState_JOB_STATE_FAILED })
		if !strings.Contains(failed.GetError(), "frame sizes differ: reference ref.y4m is 160x96, distorted wide.y4m is 176x96") || failed.GetReason() != "clips_differ" {
			t.Errorf("failed job's error: %q", failed.GetError())
		}
		// A reader cannot submit: PermissionDenied naming the role.
		_, err = readerA.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
		if status.Code(err) != codes.PermissionDenied || requiredRole(err) != "vmafx:submitter" {
			t.Errorf("reader submitting: %v", err)
		}
	})

	t.Run("an expired token file is reported and never sent; a refreshed one resumes", func(t *testing.T) {
		tokFile := filepath.Join(w.dir, "node-a2.token")
		past := now.Add(-2 * time.Hour)
		write(t, tokFile, w.mint("tenant-a", "node-a2", past, "vmafx:node"))
		n := w.node("node-a2", tokFile)
		defer func() { _ = n.Stop() }()
		expiry := past.Truncate(time.Second).Add(time.Hour).UTC().Format(time.RFC3339)
		if got := n.LogValue(t, "node: the token file holds an expired token; not sending it, polling on (is its refresher running?)", "expiry", 30*time.Second); got != expiry {
			t.Fatalf("logged expiry %s, want %s", got, expiry)
		}
		if !strings.Contains(n.Output(), tokFile) {
			t.Fatalf("the node's log does not name the file:\n%s", n.Output())
		}
		// Nothing reached the controller: no ClaimJob was refused.
		if m := w.metrics(t); strings.Contains(m, `vmafx_controller_rpcs_total{code="Unauthenticated",method="/vmafx.v1.JobService/ClaimJob"}`) {
			t.Fatalf("the expired token reached the controller:\n%s", m)
		}
		// The refresher comes back: the next poll reads the new file.
		write(t, tokFile, w.mint("tenant-a", "node-a2", time.Now(), "vmafx:node"))
		sub, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		if j := w.wait(readerA, sub.GetJob().GetId(), succeeded); j.GetNode() != "node-a2" {
			t.Fatalf("finished by %s, want node-a2 (resumed without a restart)", j.GetNode())
		}
	})

	t.Run("a node killed mid-job: the job returns after the lease, another node takes it, a cancel stops that node", func(t *testing.T) {
		// 1080p black frames in a sparse file: a minute of measuring.
		if err := clipgen.WriteSparse(filepath.Join(clips, "long.y4m"), 1920, 1080, 3000); err != nil {
			t.Fatal(err)
		}
		tok := filepath.Join(w.dir, "node-a3.token")
		write(t, tok, w.mint("tenant-a", "node-a3", now, "vmafx:node"))
		sub, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "long.y4m", Distorted: "long.y4m", Metrics: []string{"ssim"}}})
		if err != nil {
			t.Fatal(err)
		}
		doomed := w.node("node-a3", tok)
		w.wait(readerA, sub.GetJob().GetId(), func(j *vmafxv1.Job) bool {
			return j.GetNode() == "node-a3" && j.GetState() == vmafxv1.JobState_JOB_STATE_RUNNING && j.GetProgress() > 0
		})
		if err := doomed.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		back := w.wait(readerA, sub.GetJob().GetId(), func(j *vmafxv1.Job) bool { return j.GetState() == vmafxv1.JobState_JOB_STATE_PENDING })
		if back.GetError() != "the lease of node-a3 expired" || back.GetAttempts() != 1 {
			t.Errorf("back to PENDING: error %q, attempts %d", back.GetError(), back.GetAttempts())
		}
		tok4 := filepath.Join(w.dir, "node-a4.token")
		write(t, tok4, w.mint("tenant-a", "node-a4", now, "vmafx:node"))
		n4 := w.node("node-a4", tok4)
		defer func() { _ = n4.Stop() }()
		w.wait(readerA, sub.GetJob().GetId(), func(j *vmafxv1.Job) bool {
			return j.GetNode() == "node-a4" && j.GetState() == vmafxv1.JobState_JOB_STATE_RUNNING && j.GetAttempts() == 2
		})
		if !strings.Contains(w.ctl.Output(), "leases expired") {
			t.Error("the lease expiry was not logged")
		}
		// Cancelled: the node stops measuring at its next report and takes
		// the next job.
		if _, err := submitter.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: sub.GetJob().GetId()}); err != nil {
			t.Fatal(err)
		}
		if got := n4.LogValue(t, "node: stopping the job: the controller refused its progress report", "job", 30*time.Second); got != sub.GetJob().GetId() {
			t.Fatalf("node-a4 stopped job %s", got)
		}
		next, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		if j := w.wait(readerA, next.GetJob().GetId(), succeeded); j.GetNode() != "node-a4" {
			t.Fatalf("the next job finished by %s", j.GetNode())
		}
		if j, _ := readerA.GetJob(ctx, &vmafxv1.GetJobRequest{Id: sub.GetJob().GetId()}); j.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("the cancelled job: %v", j.GetJob())
		}
	})

	t.Run("a controller restart loses nothing", func(t *testing.T) {
		list, err := readerA.ListJobs(ctx, &vmafxv1.ListJobsRequest{})
		if err != nil || len(list.GetJobs()) != 5 {
			t.Fatalf("before: %v %v", list, err)
		}
		if err := w.ctl.Stop(); err != nil {
			t.Fatalf("controller exit: %v", err)
		}
		w.startController()
		after := w.client(w.mint("tenant-a", "dash-a", time.Now(), "vmafx:reader"))
		list2, err := after.ListJobs(ctx, &vmafxv1.ListJobsRequest{})
		if err != nil || len(list2.GetJobs()) != 5 {
			t.Fatalf("after: %v %v", list2, err)
		}
		for i, j := range list2.GetJobs() {
			was := list.GetJobs()[i]
			if j.GetId() != was.GetId() || j.GetState() != was.GetState() || j.GetError() != was.GetError() || len(j.GetScores()) != len(was.GetScores()) ||
				(len(j.GetScores()) > 0 && j.GetScores()[0].GetMean() != was.GetScores()[0].GetMean()) {
				t.Errorf("after the restart: %+v, before %+v", j, was)
			}
		}
	})
}

// metrics is the controller's /metrics.
func (w *world) metrics(t *testing.T) string {
	t.Helper()
	addr := w.ctl.LogValue(t, "controller: serving", "metrics", time.Second)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric is the value of an unlabelled metric of the controller.
func (w *world) metric(t *testing.T, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(w.metrics(t), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("the controller exports no %s", name)
	return 0
}

func requiredRole(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()["required_role"]
		}
	}
	return ""
}
