package operator_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	jobsv1 "github.com/callerauth/callerauth/api/vmafxjob/v1alpha1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/servicetest"
	"github.com/callerauth/callerauth/internal/kit/tenantconf"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
	"github.com/callerauth/callerauth/internal/services/vmafx/operator"
	"github.com/callerauth/callerauth/token"
)

// world is a vmafx controller serving two tenants, each with its own
// identity provider, and a fake Kubernetes API holding VmafxJobs.
type world struct {
	idp    map[string]*devissuer.Issuer
	addr   string
	ca     *pki.CA
	caFile string
	dir    string
	ctl    *controller.Server
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{idp: map[string]*devissuer.Issuer{}, dir: t.TempDir()}
	var tenants []tenantconf.Tenant
	for _, name := range []string{"tenant-a", "tenant-b"} {
		iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp." + name + ".example"})
		w.idp[name] = iss
		tenants = append(tenants, tenantconf.Tenant{Name: name, Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile()})
	}
	authnConfig := tenantconf.Write(t, filepath.Join(w.dir, "authentication-config.yaml"), tenants...)
	w.ca, _ = pki.NewCA("operator test")
	certPEM, keyPEM, _ := w.ca.Issue("127.0.0.1", "127.0.0.1")
	cert, key := filepath.Join(w.dir, "tls.crt"), filepath.Join(w.dir, "tls.key")
	_ = os.WriteFile(cert, certPEM, 0o600)
	_ = os.WriteFile(key, keyPEM, 0o600)
	w.caFile, _ = w.ca.WriteCA(filepath.Join(w.dir, "ca.crt"))
	o := controller.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.TLSCertFile, o.Serve.TLSKeyFile, o.Serve.LogOutput = "127.0.0.1:0", "", cert, key, io.Discard
	o.Callers.AuthenticationConfig, o.Datastore = authnConfig, filepath.Join(w.dir, "jobs.db")
	w.ctl = servicetest.New(t, o, nil, controller.New)
	var err error
	if w.addr, err = w.ctl.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.ctl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *world) mint(t *testing.T, tenant, subject string, issued time.Time, roles ...string) string {
	t.Helper()
	tok, err := w.idp[tenant].MintIdentity(devissuer.IdentityRequest{Subject: subject, Audiences: []string{"vmafx-controller"},
		Lifetime: time.Hour, IssuedAt: issued, Claims: map[string]any{"scp": strings.Join(roles, " ")}})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// reconciler is an operator of tenant with its token file and a fake API
// holding job.
func (w *world) reconciler(t *testing.T, tokenFile string, objs ...client.Object) (*operator.Reconciler, client.Client, *events.FakeRecorder) {
	t.Helper()
	cfg := credentials.Config{Address: w.addr, TLS: true, CAFile: w.caFile, ServerName: "127.0.0.1", TokenFile: tokenFile}
	opts, err := cfg.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	scheme := runtime.NewScheme()
	if err := jobsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&jobsv1.VmafxJob{}).Build()
	rec := events.NewFakeRecorder(100)
	return &operator.Reconciler{Client: c, Jobs: vmafxv1.NewJobServiceClient(conn), Tokens: cfg.TokenSource(), Poll: time.Second,
		Events: rec, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, c, rec
}

func vmafxJob(name string) *jobsv1.VmafxJob {
	return &jobsv1.VmafxJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name), Generation: 1},
		Spec: jobsv1.VmafxJobSpec{Reference: "ref.y4m", Distorted: "dist.y4m", Metrics: []string{"psnr"}}}
}

func reconcile(t *testing.T, r *operator.Reconciler, c client.Client, name string) (ctrl.Result, *jobsv1.VmafxJob) {
	t.Helper()
	key := types.NamespacedName{Namespace: "team-a", Name: name}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	if err != nil {
		t.Fatal(err)
	}
	var job jobsv1.VmafxJob
	if err := c.Get(context.Background(), key, &job); err != nil {
		t.Fatal(err)
	}
	return res, &job
}

func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReconcile: Pending → Running → Succeeded from what the controller
// says; a lost reply does not submit twice; a finished job is not polled.
func TestReconcile(t *testing.T) {
	w := newWorld(t)
	tokFile := filepath.Join(w.dir, "operator.token")
	writeToken(t, tokFile, w.mint(t, "tenant-a", "operator-a", time.Time{}, controller.RoleSubmitter, controller.RoleReader))
	r, c, rec := w.reconciler(t, tokFile, vmafxJob("j1"))
	res, job := reconcile(t, r, c, "j1")
	if job.Status.Phase != jobsv1.PhasePending || job.Status.JobID == "" || !meta.IsStatusConditionTrue(job.Status.Conditions, jobsv1.ConditionSubmitted) || res.RequeueAfter != time.Second {
		t.Fatalf("after submitting: %+v %+v", job.Status, res)
	}
	first := job.Status.JobID
	// The reply was lost before the status was written: the retry finds the
	// same job.
	job.Status.JobID = ""
	if err := c.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if _, job = reconcile(t, r, c, "j1"); job.Status.JobID != first {
		t.Fatalf("a retried submission created job %s beside %s", job.Status.JobID, first)
	}
	// A node claims and finishes it.
	nodeConn, _ := grpc.NewClient(w.addr, grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: w.ca.Pool(), MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(credentials.PerRPC(token.Static(w.mint(t, "tenant-a", "node-a1", time.Time{}, controller.RoleNode)))))
	defer nodeConn.Close()
	node := vmafxv1.NewJobServiceClient(nodeConn)
	claim, err := node.ClaimJob(context.Background(), &vmafxv1.ClaimJobRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, job = reconcile(t, r, c, "j1"); job.Status.Phase != jobsv1.PhaseRunning {
		t.Fatalf("running: %+v", job.Status)
	}
	if _, err := node.ReportJob(context.Background(), &vmafxv1.ReportJobRequest{Id: first, LeaseId: claim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED,
		Scores: []*vmafxv1.Score{{Metric: "psnr", Mean: 41.25, Min: 39.5, Frames: 10}}}); err != nil {
		t.Fatal(err)
	}
	res, job = reconcile(t, r, c, "j1")
	if job.Status.Phase != jobsv1.PhaseSucceeded || job.Status.Summary != "psnr=41.2500" || len(job.Status.Scores) != 1 || job.Status.Scores[0].Frames != 10 ||
		!meta.IsStatusConditionTrue(job.Status.Conditions, jobsv1.ConditionFinished) || res.RequeueAfter != 0 {
		t.Fatalf("succeeded: %+v %+v", job.Status, res)
	}
	// Finished: no call, no change, no requeue.
	writeToken(t, tokFile, "not even a token")
	if res, again := reconcile(t, r, c, "j1"); res.RequeueAfter != 0 || again.Status.Phase != jobsv1.PhaseSucceeded || again.ResourceVersion != job.ResourceVersion {
		t.Fatalf("a finished job was polled: %+v", res)
	}
	if n := len(rec.Events); n < 2 {
		t.Errorf("%d events; want Submitted and Finished", n)
	}
}

// TestDeletedJobIsCancelled: a VmafxJob carries the operator's finalizer
// from its first reconcile; deleting it cancels its job at the controller
// (the node measuring it is refused its next report) and then lets it go.
func TestDeletedJobIsCancelled(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	tokFile := filepath.Join(w.dir, "operator.token")
	writeToken(t, tokFile, w.mint(t, "tenant-a", "operator-a", time.Time{}, controller.RoleSubmitter, controller.RoleReader))
	r, c, _ := w.reconciler(t, tokFile, vmafxJob("j1"))
	_, job := reconcile(t, r, c, "j1")
	if !slices.Contains(job.Finalizers, operator.Finalizer) || job.Status.JobID == "" {
		t.Fatalf("after the first reconcile: finalizers %v, status %+v", job.Finalizers, job.Status)
	}
	nodeConn, _ := grpc.NewClient(w.addr, grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: w.ca.Pool(), MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(credentials.PerRPC(token.Static(w.mint(t, "tenant-a", "node-a1", time.Time{}, controller.RoleNode)))))
	defer nodeConn.Close()
	node := vmafxv1.NewJobServiceClient(nodeConn)
	claim, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	if err != nil || claim.GetJob().GetId() != job.Status.JobID {
		t.Fatalf("claim: %v %v", claim, err)
	}
	if err := c.Delete(ctx, job); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "j1"}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &jobsv1.VmafxJob{}); err == nil {
		t.Fatal("the deleted VmafxJob is still there")
	}
	_, err = node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: job.Status.JobID, LeaseId: claim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_RUNNING, Progress: 1})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "CANCELLED") {
		t.Fatalf("the node's next report: %v; want FailedPrecondition, CANCELLED", err)
	}
}

// TestRefusalsAreVisible: the seed's consequences as a user sees them in
// `kubectl describe`: a refused job stays Pending with a condition and an
// Event naming the refusal; an expired token file is named with its expiry
// and not sent; a renewed file resumes on the next reconcile.
func TestRefusalsAreVisible(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// Tenant A's job, followed by tenant B's operator: NotFound.
	subA := vmafxv1.NewJobServiceClient(mustConn(t, w, w.mint(t, "tenant-a", "ci-a", time.Time{}, controller.RoleSubmitter)))
	a, err := subA.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "r.y4m", Distorted: "d.y4m", Metrics: []string{"psnr"}}})
	if err != nil {
		t.Fatal(err)
	}
	foreign := vmafxJob("foreign")
	foreign.Status.JobID, foreign.Status.Phase = a.GetJob().GetId(), jobsv1.PhasePending
	tokB := filepath.Join(w.dir, "b.token")
	writeToken(t, tokB, w.mint(t, "tenant-b", "operator-b", time.Time{}, controller.RoleReader, controller.RoleSubmitter))
	rB, cB, recB := w.reconciler(t, tokB, foreign)
	_, job := reconcile(t, rB, cB, "foreign")
	cond := meta.FindStatusCondition(job.Status.Conditions, jobsv1.ConditionControllerReachable)
	if job.Status.Phase != jobsv1.PhasePending || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != operator.ReasonNotFound {
		t.Fatalf("tenant B following A's job: %+v", job.Status)
	}
	if ev := <-recB.Events; !strings.Contains(ev, "Warning JobNotFound") {
		t.Errorf("event %q", ev)
	}
	// A token without the submitter role: RoleMissing naming the role.
	tokR := filepath.Join(w.dir, "reader.token")
	writeToken(t, tokR, w.mint(t, "tenant-a", "operator-r", time.Time{}, controller.RoleReader))
	rR, cR, _ := w.reconciler(t, tokR, vmafxJob("denied"))
	_, job = reconcile(t, rR, cR, "denied")
	cond = meta.FindStatusCondition(job.Status.Conditions, jobsv1.ConditionControllerReachable)
	if job.Status.JobID != "" || cond == nil || cond.Reason != "RoleMissing" || !strings.Contains(cond.Message, "required role vmafx:submitter") {
		t.Fatalf("role missing: %+v", job.Status)
	}
	// An expired token file: named with its expiry, never sent.
	tokE := filepath.Join(w.dir, "expired.token")
	issued := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	writeToken(t, tokE, w.mint(t, "tenant-a", "operator-e", issued, controller.RoleSubmitter, controller.RoleReader))
	rE, cE, _ := w.reconciler(t, tokE, vmafxJob("stalled"))
	rpcsBefore := metricSum(t, w.ctl)
	_, job = reconcile(t, rE, cE, "stalled")
	cond = meta.FindStatusCondition(job.Status.Conditions, jobsv1.ConditionControllerReachable)
	want := fmt.Sprintf("the token from file %q expired at %s", tokE, issued.Add(time.Hour).UTC().Format(time.RFC3339))
	if cond == nil || cond.Reason != operator.ReasonTokenExpired || !strings.Contains(cond.Message, want) {
		t.Fatalf("expired token file: %+v; want %q", cond, want)
	}
	if metricSum(t, w.ctl) != rpcsBefore {
		t.Fatal("the expired token was sent")
	}
	// The refresher renews the file: the next reconcile submits.
	writeToken(t, tokE, w.mint(t, "tenant-a", "operator-e", time.Time{}, controller.RoleSubmitter, controller.RoleReader))
	if _, job = reconcile(t, rE, cE, "stalled"); job.Status.JobID == "" || !meta.IsStatusConditionTrue(job.Status.Conditions, jobsv1.ConditionControllerReachable) {
		t.Fatalf("after the refresh: %+v", job.Status)
	}
}

func mustConn(t *testing.T, w *world, tok string) *grpc.ClientConn {
	conn, err := grpc.NewClient(w.addr, grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: w.ca.Pool(), MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(credentials.PerRPC(token.Static(tok))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// metricSum is every RPC the controller answered.
func metricSum(t *testing.T, s *controller.Server) float64 {
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "vmafx_controller_rpcs_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
