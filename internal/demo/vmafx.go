package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	jobsv1 "github.com/callerauth/callerauth/api/vmafxjob/v1alpha1"
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
	"github.com/callerauth/callerauth/internal/services/vmafx/jobcli"
	"github.com/callerauth/callerauth/internal/services/vmafx/node"
	"github.com/callerauth/callerauth/internal/services/vmafx/operator"
)

// The vmafx controller and node in-process, with two dev issuers as the
// identity providers of tenant-a and tenant-b.

type vmafxWorld struct {
	dir    string
	idp    map[string]*devissuer.Issuer
	addr   string
	ca     *pki.CA
	caFile string
	stop   func()
}

func (e *env) startVmafx() (*vmafxWorld, error) {
	dir, err := os.MkdirTemp(e.dir, "vmafx-")
	if err != nil {
		return nil, err
	}
	return startVmafx(dir)
}

// VmafxWorld is the demo's vmafx world for a test of its own (the CLI's):
// a controller in-process on loopback TLS, on an AuthenticationConfiguration
// of two dev issuers, the identity providers of tenant-a and tenant-b.
type VmafxWorld struct{ w *vmafxWorld }

// StartVmafx starts a world in dir; Stop ends it.
func StartVmafx(dir string) (*VmafxWorld, error) {
	w, err := startVmafx(dir)
	if err != nil {
		return nil, err
	}
	return &VmafxWorld{w}, nil
}

// Stop stops the controller and the issuers.
func (v *VmafxWorld) Stop() { v.w.stop() }

// Addr is the controller's address.
func (v *VmafxWorld) Addr() string { return v.w.addr }

// CAFile is the CA of the controller's serving certificate.
func (v *VmafxWorld) CAFile() string { return v.w.caFile }

// Mint is a token of tenant's identity provider for subject with roles.
func (v *VmafxWorld) Mint(tenant, subject string, roles ...string) string {
	return v.w.mint(tenant, subject, time.Time{}, roles...)
}

// RunNode runs a tenant-a node (its token minted for subject) until the
// returned stop; Clips writes tenant-a's two clips and names them.
func (v *VmafxWorld) RunNode(subject string) (stop func(), err error) {
	_, stop, err = v.w.runNode(v.w.nodeToken(subject, time.Time{}))
	return stop, err
}

// Clips writes tenant-a's reference and distorted clips and returns their
// names, relative to the tenant's clip directory.
func (v *VmafxWorld) Clips() (ref, dist string, err error) { return v.w.clips() }

// ClientConfig writes the client configuration a vmafx program reads (the
// controller section: this controller, its CA, a token file holding tok)
// and returns its path.
func (v *VmafxWorld) ClientConfig(name, tok string) (string, error) {
	return v.w.clientConfig(name, tok)
}

func (w *vmafxWorld) clientConfig(name, tok string) (string, error) {
	tokFile := filepath.Join(w.dir, name+".token")
	if err := os.WriteFile(tokFile, []byte(tok), 0o600); err != nil {
		return "", err
	}
	p := filepath.Join(w.dir, name+".yaml")
	return p, os.WriteFile(p, fmt.Appendf(nil, "controller:\n  address: %s\n  tls: true\n  ca_file: %s\n  server_name: 127.0.0.1\n  token_file: %s\n", w.addr, w.caFile, tokFile), 0o600)
}

// withNode starts a world with tenant-a's clips and a node measuring
// them; stop ends both.
func (e *env) withNode() (w *vmafxWorld, ref, dist string, stop func(), err error) {
	if w, err = e.startVmafx(); err != nil {
		return nil, "", "", nil, err
	}
	if ref, dist, err = w.clips(); err != nil {
		w.stop()
		return nil, "", "", nil, err
	}
	_, stopNode, err := w.runNode(w.nodeToken("node-a1", time.Time{}))
	if err != nil {
		w.stop()
		return nil, "", "", nil, err
	}
	return w, ref, dist, func() { stopNode(); w.stop() }, nil
}

func startVmafx(dir string) (*vmafxWorld, error) {
	var err error
	w := &vmafxWorld{dir: dir, idp: map[string]*devissuer.Issuer{}}
	var stops []func()
	w.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	var issuers oidc.Config
	for _, name := range []string{"tenant-a", "tenant-b"} {
		iss, err := devissuer.Open(filepath.Join(dir, name), devissuer.Config{Issuer: "https://idp." + name + ".example"})
		if err != nil {
			w.stop()
			return nil, err
		}
		srv, err := iss.Serve("127.0.0.1:0", nil)
		if err != nil {
			w.stop()
			return nil, err
		}
		stops = append(stops, func() { _ = srv.Close() })
		w.idp[name] = iss
		issuers.Issuers = append(issuers.Issuers, oidc.IssuerConfig{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(),
			Audiences: []string{"vmafx-controller"}, Tenant: name, RolesClaim: "scp"})
	}
	// The tenants' identity providers as the API server's
	// AuthenticationConfiguration: one constant tenant per issuer.
	doc, _, err := authconfig.Convert(issuers)
	if err != nil {
		w.stop()
		return nil, err
	}
	authnFile := filepath.Join(dir, "authn.yaml")
	if err := os.WriteFile(authnFile, doc, 0o600); err != nil {
		w.stop()
		return nil, err
	}
	if w.ca, err = pki.NewCA("vmafx demo"); err != nil {
		w.stop()
		return nil, err
	}
	certPEM, keyPEM, _ := w.ca.Issue("127.0.0.1", "127.0.0.1")
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(cert, certPEM, 0o600)
	_ = os.WriteFile(key, keyPEM, 0o600)
	w.caFile, _ = w.ca.WriteCA(filepath.Join(dir, "ca.crt"))
	o := controller.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.TLSCertFile, o.Serve.TLSKeyFile, o.Serve.LogOutput = "127.0.0.1:0", "", cert, key, io.Discard
	o.Callers.AuthenticationConfig, o.Datastore, o.Lease = authnFile, filepath.Join(dir, "jobs.db"), 5*time.Second
	c, err := o.Complete()
	var ctl *controller.Server
	if err == nil {
		ctl, err = controller.New(c)
	}
	if err != nil {
		w.stop()
		return nil, err
	}
	if w.addr, err = ctl.Listen(); err != nil {
		w.stop()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ctl.Run(ctx); close(done) }()
	stops = append(stops, func() { cancel(); <-done })
	return w, nil
}

func (w *vmafxWorld) mint(tenant, subject string, issued time.Time, roles ...string) string {
	tok, err := w.idp[tenant].MintIdentity(devissuer.IdentityRequest{Subject: subject, Audiences: []string{"vmafx-controller"},
		IssuedAt: issued, Claims: map[string]any{"scp": strings.Join(roles, " ")}})
	if err != nil {
		return ""
	}
	return tok.Token
}

func (w *vmafxWorld) client(tok string) (vmafxv1.JobServiceClient, func(), error) {
	conn, err := loopback.DialTLS(w.addr, w.ca.Pool(), tok)
	if err != nil {
		return nil, nil, err
	}
	return vmafxv1.NewJobServiceClient(conn), func() { _ = conn.Close() }, nil
}

// nodeToken writes a tenant-a node token for subject, issued at issued
// (zero: now), to the world's node token file and returns its path.
func (w *vmafxWorld) nodeToken(subject string, issued time.Time) string {
	p := filepath.Join(w.dir, "node.token")
	_ = os.WriteFile(p, []byte(w.mint("tenant-a", subject, issued, controller.RoleNode)), 0o600)
	return p
}

// runNode runs a node with tokenFile until stop is called; its log goes to
// the returned buffer. Its clip root is the world's (clips of tenant-a are
// in clips/tenant-a); tune adjusts its options.
func (w *vmafxWorld) runNode(tokenFile string, tune ...func(*node.Options)) (*capture.Buffer, func(), error) {
	env := map[string]string{"VMAFX_CONTROLLER_ADDRESS": w.addr, "VMAFX_CONTROLLER_TLS": "true", "VMAFX_CONTROLLER_CA_FILE": w.caFile,
		"VMAFX_CONTROLLER_SERVER_NAME": "127.0.0.1", "VMAFX_CONTROLLER_TOKEN_FILE": tokenFile}
	var log capture.Buffer
	o := node.NewOptions("")
	o.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o.Poll, o.ReportEvery, o.ClipRoot, o.Serve.MetricsListen, o.Serve.LogOutput = 50*time.Millisecond, 200*time.Millisecond, filepath.Join(w.dir, "clips"), "", &log
	for _, f := range tune {
		f(&o)
	}
	c, err := o.Complete()
	if err != nil {
		return nil, nil, err
	}
	n, err := node.New(c)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	return &log, func() { cancel(); <-done; _ = n.Close() }, nil
}

// clips writes tenant-a's reference and distorted clips into its clip
// directory and returns their names, relative to it as a job names them.
func (w *vmafxWorld) clips() (ref, dist string, err error) {
	dir := filepath.Join(w.dir, "clips", "tenant-a")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	ref, dist = "ref.y4m", "dist.y4m"
	if err = clipgen.WriteFile(filepath.Join(dir, ref), clipgen.Spec{Width: 176, Height: 144, Frames: 10}); err == nil {
		err = clipgen.WriteFile(filepath.Join(dir, dist), clipgen.Spec{Width: 176, Height: 144, Frames: 10, Noise: 8, Seed: 1})
	}
	return ref, dist, err
}

// vmafxPoison: a job no node can finish (its measurement outlasts the
// node's --max-job-duration) is given back, queued behind the tenant's
// other jobs, and FAILED attempts_exhausted after its third claim; the
// jobs submitted after it run meanwhile.
func vmafxPoison(ctx context.Context, e *env) Result {
	r := Result{Scenario: "vmafx: a poison job fails after its attempts; the queue behind it runs",
		Expected: "poison FAILED attempts_exhausted after 3 claims; the 2 jobs behind it SUCCEEDED"}
	w, err := e.startVmafx()
	if err != nil {
		return fail(r, err)
	}
	defer w.stop()
	ref, dist, err := w.clips()
	if err != nil {
		return fail(r, err)
	}
	// 1080p black frames in a sparse file: about 40 s of measuring.
	if err := clipgen.WriteSparse(filepath.Join(w.dir, "clips", "tenant-a", "long.y4m"), 1920, 1080, 2000); err != nil {
		return fail(r, err)
	}
	c, closeC, err := w.client(w.mint("tenant-a", "ci-a", time.Time{}, controller.RoleSubmitter, controller.RoleReader))
	if err != nil {
		return fail(r, err)
	}
	defer closeC()
	var ids []string
	for _, spec := range []*vmafxv1.JobSpec{
		{Reference: "long.y4m", Distorted: "long.y4m", Metrics: []string{"ssim"}},
		{Reference: ref, Distorted: dist, Metrics: []string{"psnr"}},
		{Reference: ref, Distorted: dist, Metrics: []string{"ssim"}},
	} {
		sub, err := c.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
		if err != nil {
			return fail(r, err)
		}
		ids = append(ids, sub.GetJob().GetId())
	}
	_, stopNode, err := w.runNode(w.nodeToken("node-a1", time.Time{}), func(o *node.Options) { o.MaxJobDuration = 300 * time.Millisecond })
	if err != nil {
		return fail(r, err)
	}
	defer stopNode()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var jobs []*vmafxv1.Job
		for _, id := range ids {
			if g, err := c.GetJob(ctx, &vmafxv1.GetJobRequest{Id: id}); err == nil {
				jobs = append(jobs, g.GetJob())
			}
		}
		if len(jobs) != 3 || jobs[0].GetState() != vmafxv1.JobState_JOB_STATE_FAILED {
			continue
		}
		r.Observed = fmt.Sprintf("poison %s %s after %d claims (%s); behind it: %s, %s", jobs[0].GetState(), jobs[0].GetReason(), jobs[0].GetAttempts(),
			jobs[0].GetError(), jobs[1].GetState(), jobs[2].GetState())
		r.Pass = jobs[0].GetReason() == controller.ReasonAttemptsExhausted && jobs[0].GetAttempts() == 3 &&
			jobs[1].GetState() == vmafxv1.JobState_JOB_STATE_SUCCEEDED && jobs[2].GetState() == vmafxv1.JobState_JOB_STATE_SUCCEEDED
		return r
	}
	return fail(r, fmt.Errorf("the poison job did not fail in 30 s"))
}

// vmafxRetries: a claim sent again with its claim_key (its answer lost)
// holds the job it leased, and an outcome sent again under the lease that
// ended the job changes nothing: a job is claimed once and ends once.
func vmafxRetries(ctx context.Context, e *env) Result {
	r := Result{Scenario: "vmafx: a claim and an outcome sent twice (answers lost)",
		Expected: "the retried claim holds the same job and lease (1 attempt); the repeated outcome returns the job as it ended; the next job still PENDING"}
	w, err := e.startVmafx()
	if err != nil {
		return fail(r, err)
	}
	defer w.stop()
	c, closeC, err := w.client(w.mint("tenant-a", "ci-a", time.Time{}, controller.RoleSubmitter, controller.RoleReader))
	if err != nil {
		return fail(r, err)
	}
	defer closeC()
	n, closeN, err := w.client(w.mint("tenant-a", "node-a1", time.Time{}, controller.RoleNode))
	if err != nil {
		return fail(r, err)
	}
	defer closeN()
	var ids []string
	for range 2 {
		sub, err := c.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "dist.y4m", Metrics: []string{"psnr"}}})
		if err != nil {
			return fail(r, err)
		}
		ids = append(ids, sub.GetJob().GetId())
	}
	var claims [2]*vmafxv1.ClaimJobResponse
	for i := range claims {
		if claims[i], err = n.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{ClaimKey: "claim-1"}); err != nil {
			return fail(r, err)
		}
	}
	report := &vmafxv1.ReportJobRequest{Id: ids[0], LeaseId: claims[0].GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED,
		Scores: []*vmafxv1.Score{{Metric: "psnr", Mean: 40, Min: 39, Frames: 10}}}
	var outcomes [2]*vmafxv1.ReportJobResponse
	for i := range outcomes {
		if outcomes[i], err = n.ReportJob(ctx, report); err != nil {
			return fail(r, err)
		}
	}
	next, err := c.GetJob(ctx, &vmafxv1.GetJobRequest{Id: ids[1]})
	if err != nil {
		return fail(r, err)
	}
	jobID := func(id string) string { return id[:min(8, len(id))] + "…" }
	sameClaim := claims[0].GetJob().GetId() == ids[0] && claims[1].GetJob().GetId() == ids[0] && claims[0].GetLeaseId() == claims[1].GetLeaseId()
	r.Observed = fmt.Sprintf("claims: %s, %s (same lease %v, attempt %d); outcomes: %s, %s; next job %s",
		jobID(claims[0].GetJob().GetId()), jobID(claims[1].GetJob().GetId()), claims[0].GetLeaseId() == claims[1].GetLeaseId(), claims[1].GetJob().GetAttempts(),
		outcomes[0].GetJob().GetState(), outcomes[1].GetJob().GetState(), next.GetJob().GetState())
	r.Pass = sameClaim && claims[1].GetJob().GetAttempts() == 1 &&
		outcomes[1].GetJob().GetState() == vmafxv1.JobState_JOB_STATE_SUCCEEDED && outcomes[1].GetJob().GetUpdatedAt().AsTime().Equal(outcomes[0].GetJob().GetUpdatedAt().AsTime()) &&
		next.GetJob().GetState() == vmafxv1.JobState_JOB_STATE_PENDING
	return r
}

func vmafxMeasure(ctx context.Context, e *env) Result {
	r := Result{Scenario: "vmafx: submit, node claims and measures", Expected: "SUCCEEDED with luma PSNR and SSIM"}
	w, ref, dist, stop, err := e.withNode()
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	c, closeC, err := w.client(w.mint("tenant-a", "ci-a", time.Time{}, controller.RoleSubmitter, controller.RoleReader))
	if err != nil {
		return fail(r, err)
	}
	defer closeC()
	sub, err := c.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: ref, Distorted: dist, Metrics: []string{"psnr", "ssim"}}})
	if err != nil {
		return fail(r, err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		g, err := c.GetJob(ctx, &vmafxv1.GetJobRequest{Id: sub.GetJob().GetId()})
		if err == nil && g.GetJob().GetState() == vmafxv1.JobState_JOB_STATE_SUCCEEDED && len(g.GetJob().GetScores()) == 2 {
			s := g.GetJob().GetScores()
			r.Observed = fmt.Sprintf("SUCCEEDED by %s: psnr mean %.2f dB, ssim mean %.4f over %d frames", g.GetJob().GetNode(), s[0].GetMean(), s[1].GetMean(), s[0].GetFrames())
			r.Pass = s[0].GetFrames() == 10 && s[0].GetMean() > 20 && s[1].GetMean() > 0 && s[1].GetMean() < 1
			return r
		}
	}
	return fail(r, fmt.Errorf("the job did not succeed in 20 s"))
}

func vmafxScoping(ctx context.Context, e *env) Result {
	r := Result{Scenario: "vmafx: tenant B reads tenant A's job; a reader submits", Expected: "NotFound; PermissionDenied naming vmafx:submitter"}
	w, err := e.startVmafx()
	if err != nil {
		return fail(r, err)
	}
	defer w.stop()
	a, closeA, err := w.client(w.mint("tenant-a", "ci-a", time.Time{}, controller.RoleSubmitter))
	if err != nil {
		return fail(r, err)
	}
	defer closeA()
	b, closeB, _ := w.client(w.mint("tenant-b", "dash-b", time.Time{}, controller.RoleReader))
	defer closeB()
	reader, closeR, _ := w.client(w.mint("tenant-a", "dash-a", time.Time{}, controller.RoleReader))
	defer closeR()
	sub, err := a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "r.y4m", Distorted: "d.y4m", Metrics: []string{"psnr"}}})
	if err != nil {
		return fail(r, err)
	}
	_, errB := b.GetJob(ctx, &vmafxv1.GetJobRequest{Id: sub.GetJob().GetId()})
	_, errR := reader.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: sub.GetJob().GetSpec()})
	role := ""
	for _, d := range status.Convert(errR).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			role = info.GetMetadata()["required_role"]
		}
	}
	r.Observed = fmt.Sprintf("%s; %s %s (required_role %s)", status.Code(errB), status.Code(errR), status.Convert(errR).Message(), role)
	r.Pass = status.Code(errB).String() == "NotFound" && status.Code(errR).String() == "PermissionDenied" && role == controller.RoleSubmitter
	return r
}

func vmafxExpiredTokenFile(_ context.Context, e *env) Result {
	r := Result{Scenario: "vmafx: node's token file holds an expired JWT", Expected: "logged with the file and expiry, never sent; a refreshed file resumes"}
	w, err := e.startVmafx()
	if err != nil {
		return fail(r, err)
	}
	defer w.stop()
	tokFile := w.nodeToken("node-a2", time.Now().Add(-3*time.Hour))
	log, stopNode, err := w.runNode(tokFile)
	if err != nil {
		return fail(r, err)
	}
	defer stopNode()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "expired token") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	named := strings.Contains(log.String(), tokFile) && strings.Contains(log.String(), `"expiry"`)
	_ = os.WriteFile(tokFile, []byte(w.mint("tenant-a", "node-a2", time.Time{}, controller.RoleNode)), 0o600)
	for !strings.Contains(log.String(), "polling") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	before := strings.Count(log.String(), "expired token")
	time.Sleep(300 * time.Millisecond)
	resumed := strings.Count(log.String(), "expired token") == before
	r.Observed = fmt.Sprintf("logged naming file and expiry: %t; after refresh, no more refusals: %t", named, resumed)
	r.Pass = named && resumed
	return r
}

var vmafxScenarios = []func(context.Context, *env) Result{vmafxMeasure, vmafxCLI, vmafxScoping, vmafxExpiredTokenFile, vmafxPoison, vmafxRetries, vmafxOperatorJob, vmafxOperatorExpired}

// The operator's reconciler, against controller-runtime's fake Kubernetes
// client (no API server here; test/operator runs it against the real one).

func (w *vmafxWorld) reconciler(tokenFile string, job *jobsv1.VmafxJob) (*operator.Reconciler, client.Client, func(), error) {
	cfg := credentials.Config{Address: w.addr, TLS: true, CAFile: w.caFile, ServerName: "127.0.0.1", TokenFile: tokenFile}
	conn, err := cfg.Dial()
	if err != nil {
		return nil, nil, nil, err
	}
	scheme := runtime.NewScheme()
	_ = jobsv1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job).WithStatusSubresource(&jobsv1.VmafxJob{}).Build()
	return &operator.Reconciler{Client: c, Jobs: vmafxv1.NewJobServiceClient(conn), Tokens: cfg.TokenSource(), Poll: 100 * time.Millisecond},
		c, func() { _ = conn.Close() }, nil
}

func demoJob(name, ref, dist string) *jobsv1.VmafxJob {
	return &jobsv1.VmafxJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name)},
		Spec: jobsv1.VmafxJobSpec{Reference: ref, Distorted: dist, Metrics: []string{"psnr", "ssim"}}}
}

// reconcileUntil reconciles until the status satisfies done (10 s at most).
func reconcileUntil(ctx context.Context, r *operator.Reconciler, c client.Client, name string, done func(*jobsv1.VmafxJob) bool) (*jobsv1.VmafxJob, error) {
	key := types.NamespacedName{Namespace: "team-a", Name: name}
	var job jobsv1.VmafxJob
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			return nil, err
		}
		if err := c.Get(ctx, key, &job); err != nil {
			return nil, err
		}
		if done(&job) {
			return &job, nil
		}
	}
	return &job, fmt.Errorf("status %+v after 10 s", job.Status)
}

func vmafxOperatorJob(ctx context.Context, e *env) Result {
	r := Result{Scenario: "vmafx operator (fake Kubernetes client): a VmafxJob", Expected: "Pending → Succeeded with the node's scores in status"}
	w, err := e.startVmafx()
	if err != nil {
		return fail(r, err)
	}
	defer w.stop()
	ref, dist, err := w.clips()
	if err != nil {
		return fail(r, err)
	}
	nodeTok, opTok := w.nodeToken("node-a1", time.Time{}), filepath.Join(w.dir, "operator.token")
	_ = os.WriteFile(opTok, []byte(w.mint("tenant-a", "operator-a", time.Time{}, controller.RoleSubmitter, controller.RoleReader)), 0o600)
	_, stopNode, err := w.runNode(nodeTok)
	if err != nil {
		return fail(r, err)
	}
	defer stopNode()
	rec, c, closeConn, err := w.reconciler(opTok, demoJob("measure", ref, dist))
	if err != nil {
		return fail(r, err)
	}
	defer closeConn()
	job, err := reconcileUntil(ctx, rec, c, "measure", func(j *jobsv1.VmafxJob) bool { return j.Status.Phase == jobsv1.PhaseSucceeded })
	if err != nil {
		return fail(r, err)
	}
	r.Observed = fmt.Sprintf("%s: %s (job %s…)", job.Status.Phase, job.Status.Summary, job.Status.JobID[:8])
	r.Pass = len(job.Status.Scores) == 2 && meta.IsStatusConditionTrue(job.Status.Conditions, jobsv1.ConditionFinished)
	return r
}

func vmafxOperatorExpired(ctx context.Context, e *env) Result {
	r := Result{Scenario: "vmafx operator (fake Kubernetes client): expired token file", Expected: "Pending, condition TokenExpired naming the file and expiry"}
	w, err := e.startVmafx()
	if err != nil {
		return fail(r, err)
	}
	defer w.stop()
	opTok := filepath.Join(w.dir, "operator.token")
	_ = os.WriteFile(opTok, []byte(w.mint("tenant-a", "operator-a", time.Now().Add(-3*time.Hour), controller.RoleSubmitter, controller.RoleReader)), 0o600)
	rec, c, closeConn, err := w.reconciler(opTok, demoJob("stalled", "/r.y4m", "/d.y4m"))
	if err != nil {
		return fail(r, err)
	}
	defer closeConn()
	job, err := reconcileUntil(ctx, rec, c, "stalled", func(j *jobsv1.VmafxJob) bool {
		return meta.FindStatusCondition(j.Status.Conditions, jobsv1.ConditionControllerReachable) != nil
	})
	if err != nil {
		return fail(r, err)
	}
	cond := meta.FindStatusCondition(job.Status.Conditions, jobsv1.ConditionControllerReachable)
	r.Observed = fmt.Sprintf("%s, %s: %s", job.Status.Phase, cond.Reason, strings.Replace(cond.Message, w.dir, "…", 1))
	r.Pass = job.Status.Phase == jobsv1.PhasePending && cond.Reason == operator.ReasonTokenExpired && strings.Contains(cond.Message, opTok) && job.Status.JobID == ""
	return r
}

// vmafxCLI: the command line a tenant's engineer uses — callerauth vmafx
// submit, then watch to the job's end; a reader's submit refused with the
// role it lacks and its own exit code.
func vmafxCLI(ctx context.Context, e *env) Result {
	r := Result{Scenario: "vmafx CLI: callerauth vmafx submit, watch; a reader submits",
		Expected: "SUCCEEDED with psnr and ssim; the reader refused: exit 3, needs role vmafx:submitter"}
	w, ref, dist, stop, err := e.withNode()
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	config := func(name string, roles ...string) (string, error) {
		return w.clientConfig(name, w.mint("tenant-a", name, time.Time{}, roles...))
	}
	ci, err := config("ci-a", controller.RoleSubmitter, controller.RoleReader)
	if err != nil {
		return fail(r, err)
	}
	dash, err := config("dash-a", controller.RoleReader)
	if err != nil {
		return fail(r, err)
	}
	vmafx := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := jobcli.NewCommand(&jobcli.Options{Stdout: &out, Stderr: io.Discard, Getenv: func(string) string { return "" }})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := vmafx("--config", ci, "submit", "--reference", ref, "--distorted", dist, "-o", "json")
	var sub struct{ Job struct{ ID string } }
	if err != nil || json.Unmarshal([]byte(out), &sub) != nil || sub.Job.ID == "" {
		return fail(r, fmt.Errorf("submit: %w %s", err, out))
	}
	out, err = vmafx("--config", ci, "watch", sub.Job.ID, "--interval", "100ms", "--timeout", "20s", "-o", "json")
	var done struct {
		Job struct {
			State  string
			Scores []struct {
				Metric string
				Mean   float64
			}
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &done) != nil || len(done.Job.Scores) != 2 {
		return fail(r, fmt.Errorf("watch: %w %s", err, out))
	}
	_, refused := vmafx("--config", dash, "submit", "--reference", ref, "--distorted", dist)
	code := jobcli.ExitCode(refused)
	r.Observed = fmt.Sprintf("%s psnr %.2f ssim %.4f; the reader: exit %d (%v)", done.Job.State, done.Job.Scores[0].Mean, done.Job.Scores[1].Mean, code, refused)
	r.Pass = done.Job.State == "JOB_STATE_SUCCEEDED" && code == jobcli.ExitRefused && refused != nil && strings.Contains(refused.Error(), "needs role vmafx:submitter")
	return r
}
