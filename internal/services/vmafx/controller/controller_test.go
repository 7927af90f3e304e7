package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/cost"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
	"github.com/callerauth/callerauth/internal/kit/servicetest"
	"github.com/callerauth/callerauth/internal/kit/tenantconf"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
)

// env is a controller serving two tenants, each with its own identity
// provider (a dev issuer under its own issuer name).
type env struct {
	idp   map[string]*devissuer.Issuer
	ctl   *controller.Server
	addr  string
	ca    *pki.CA
	log   *capture.Buffer
	clock *atomic.Int64 // unix nanos; 0: real time
	stop  func()
	dir   string
}

// backends are the datastores the controller's tests run on: an SQLite
// file in dir, and a database on a real PostgreSQL server.
func backends(t *testing.T, dir string) map[string]string {
	return map[string]string{"sqlite": filepath.Join(dir, "jobs.db"), "postgres": pgtest.Start(t).NewDatabase(t)}
}

func startOn(t testing.TB, dir, datastore string, tune ...func(*controller.Options)) *env {
	t.Helper()
	e := &env{idp: map[string]*devissuer.Issuer{}, log: &capture.Buffer{}, clock: &atomic.Int64{}, dir: dir}
	var tenants []tenantconf.Tenant
	for _, name := range []string{"tenant-a", "tenant-b"} {
		iss, srv := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp." + name + ".example"})
		e.idp[name] = iss
		tenants = append(tenants, tenantconf.Tenant{Name: name, Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile()})
	}
	o := controller.NewOptions()
	o.Datastore, o.Lease = datastore, 10*time.Second
	o.Callers.AuthenticationConfig = tenantconf.Write(t, filepath.Join(dir, "authentication-config.yaml"), tenants...)
	for _, f := range tune {
		f(&o)
	}
	return e.start(t, dir, o)
}

// startWith runs a controller on o, with a serving certificate of its own
// and a logger the test reads.
func startWith(t testing.TB, dir string, o controller.Options) *env {
	t.Helper()
	return (&env{idp: map[string]*devissuer.Issuer{}, log: &capture.Buffer{}, clock: &atomic.Int64{}, dir: dir}).start(t, dir, o)
}

func (e *env) start(t testing.TB, dir string, o controller.Options) *env {
	t.Helper()
	var err error
	if e.ca, err = pki.NewCA("controller test"); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, _ := e.ca.Issue("127.0.0.1", "127.0.0.1")
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(cert, certPEM, 0o600)
	_ = os.WriteFile(key, keyPEM, 0o600)
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.TLSCertFile, o.Serve.TLSKeyFile, o.Serve.LogOutput = "127.0.0.1:0", "", cert, key, e.log
	// Leases looked at often, on a clock the test may set.
	e.ctl = servicetest.New(t, o, func(c *controller.Config) {
		c.LeaseCheck = 10 * time.Millisecond
		c.Now = func() time.Time {
			if n := e.clock.Load(); n != 0 {
				return time.Unix(0, n)
			}
			return time.Now()
		}
	}, controller.New)
	if e.addr, err = e.ctl.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.ctl.Run(ctx) }()
	var once sync.Once
	e.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(func() { e.stop() })
	return e
}

// client is a JobService client with a token of tenant for subject with
// the roles.
func (e *env) client(t testing.TB, tenant, subject string, roles ...string) vmafxv1.JobServiceClient {
	t.Helper()
	tok, err := e.idp[tenant].MintIdentity(devissuer.IdentityRequest{Subject: subject, Audiences: []string{"vmafx-controller"},
		Claims: map[string]any{"scp": strings.Join(roles, " ")}})
	if err != nil {
		t.Fatal(err)
	}
	return e.clientWith(t, tok.Token)
}

func (e *env) clientWith(t testing.TB, tok string) vmafxv1.JobServiceClient {
	t.Helper()
	// Not expiry-checked: these tests send expired tokens on purpose.
	conn, err := loopback.DialTLS(e.addr, e.ca.Pool(), tok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return vmafxv1.NewJobServiceClient(conn)
}

var spec = &vmafxv1.JobSpec{Reference: "ref.y4m", Distorted: "takes/dist.y4m", Metrics: []string{"psnr", "ssim"}}

// bothScores are a SUCCEEDED report's scores for spec.
var bothScores = []*vmafxv1.Score{{Metric: "psnr", Mean: 40.1, Min: 38, Frames: 10}, {Metric: "ssim", Mean: 0.98, Min: 0.97, Frames: 10}}

// TestEveryMethodHasARule: a method added to JobService without a role in
// MethodRoles fails here (and would be refused for everyone).
func TestEveryMethodHasARule(t *testing.T) {
	for _, m := range vmafxv1.JobService_ServiceDesc.Methods {
		full := "/" + vmafxv1.JobService_ServiceDesc.ServiceName + "/" + m.MethodName
		if controller.MethodRoles[full] == "" {
			t.Errorf("%s has no role in controller.MethodRoles", full)
		}
	}
	if len(vmafxv1.JobService_ServiceDesc.Streams) != 0 {
		t.Error("JobService has streaming methods: guard them and give them roles")
	}
}

func code(err error) codes.Code { return status.Code(err) }

// TestTenantsAndRoles runs the seed's consequences as rows: the tenant is
// the issuer's, roles gate each method, another tenant's job does not exist.
func TestTenantsAndRoles(t *testing.T) {
	for name, target := range backends(t, t.TempDir()) {
		t.Run(name, func(t *testing.T) { testTenantsAndRoles(t, target) })
	}
}

func testTenantsAndRoles(t *testing.T, datastore string) {
	e := startOn(t, t.TempDir(), datastore)
	ctx := context.Background()
	submitterA := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter, controller.RoleReader)
	readerA := e.client(t, "tenant-a", "dash-a", controller.RoleReader)
	readerB := e.client(t, "tenant-b", "dash-b", controller.RoleReader)
	nodeA := e.client(t, "tenant-a", "node-a1", controller.RoleNode)
	nodeA2 := e.client(t, "tenant-a", "node-a2", controller.RoleNode)
	nodeB := e.client(t, "tenant-b", "node-b1", controller.RoleNode)

	sub, err := submitterA.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	job := sub.GetJob()
	if job.GetTenant() != "tenant-a" || job.GetState() != vmafxv1.JobState_JOB_STATE_PENDING || job.GetSubmittedBy() != "ci-a" {
		t.Fatalf("submitted %+v", job)
	}
	if got, err := readerA.GetJob(ctx, &vmafxv1.GetJobRequest{Id: job.GetId()}); err != nil || got.GetJob().GetId() != job.GetId() {
		t.Fatalf("reader A: %v", err)
	}
	// Tenant B cannot tell A's job from one that does not exist.
	_, errOther := readerB.GetJob(ctx, &vmafxv1.GetJobRequest{Id: job.GetId()})
	_, errNone := readerB.GetJob(ctx, &vmafxv1.GetJobRequest{Id: "no-such-job"})
	if code(errOther) != codes.NotFound || status.Convert(errOther).Message() != status.Convert(errNone).Message() {
		t.Fatalf("tenant B reading A's job: %v (a missing job: %v)", errOther, errNone)
	}
	// A reader cannot submit: PermissionDenied naming the role required.
	_, err = readerA.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
	if code(err) != codes.PermissionDenied || requiredRole(err) != controller.RoleSubmitter {
		t.Fatalf("reader submitting: %v (required role %q)", err, requiredRole(err))
	}
	if _, err := readerA.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{}); code(err) != codes.PermissionDenied || requiredRole(err) != controller.RoleNode {
		t.Fatalf("reader claiming: %v", err)
	}
	// A bad or expired token is Unauthenticated with the guard's reason.
	expired, err := e.idp["tenant-a"].MintIdentity(devissuer.IdentityRequest{Subject: "ci-a", Audiences: []string{"vmafx-controller"},
		Lifetime: time.Minute, IssuedAt: time.Now().Add(-time.Hour), Claims: map[string]any{"scp": controller.RoleReader}})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]vmafxv1.JobServiceClient{
		"expired":             e.clientWith(t, expired.Token),
		"another audience":    e.clientWithAudience(t, "tenant-a", "other-service"),
		"an unknown issuer's": e.clientWithIssuer(t),
	} {
		if _, err := c.GetJob(ctx, &vmafxv1.GetJobRequest{Id: job.GetId()}); code(err) != codes.Unauthenticated || status.Convert(err).Message() != "token_invalid" {
			t.Errorf("%s token: %v", name, err)
		}
	}
	// A submission with a request_id is idempotent per tenant.
	first, err := submitterA.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: "uid-1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := submitterA.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: "uid-1"})
	if err != nil || again.GetJob().GetId() != first.GetJob().GetId() {
		t.Fatalf("a retried submission created another job: %v %v", again, err)
	}
	otherTenant, err := e.client(t, "tenant-b", "ci-b", controller.RoleSubmitter).SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: "uid-1"})
	if err != nil || otherTenant.GetJob().GetId() == first.GetJob().GetId() || otherTenant.GetJob().GetTenant() != "tenant-b" {
		t.Fatalf("tenant B's request uid-1: %v %v", otherTenant, err)
	}
	// Lists are the caller's tenant's.
	if l, err := readerA.ListJobs(ctx, &vmafxv1.ListJobsRequest{}); err != nil || len(l.GetJobs()) != 2 {
		t.Fatalf("list A: %v %v", l, err)
	}
	if l, err := readerB.ListJobs(ctx, &vmafxv1.ListJobsRequest{}); err != nil || len(l.GetJobs()) != 1 || l.GetJobs()[0].GetTenant() != "tenant-b" {
		t.Fatalf("list B: %v %v", l, err)
	}
	// A node claims only its tenant's jobs.
	if c, err := nodeB.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{}); err != nil || c.GetJob().GetTenant() != "tenant-b" || c.GetJob().GetId() != otherTenant.GetJob().GetId() {
		t.Fatalf("node B claimed %v %v; want tenant B's job", c, err)
	}
	claim, err := nodeA.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	if err != nil || claim.GetJob().GetId() != job.GetId() || claim.GetJob().GetNode() != "node-a1" || claim.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("node A claim: %v %v", claim, err)
	}
	// Only the node holding the lease may report; only legal transitions.
	done := &vmafxv1.ReportJobRequest{Id: job.GetId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: bothScores}
	if _, err := nodeA2.ReportJob(ctx, done); code(err) != codes.FailedPrecondition {
		t.Fatalf("another node reporting without the lease: %v", err)
	}
	if len(claim.GetLeaseId()) < 22 {
		t.Fatalf("lease id %q: want 128 random bits", claim.GetLeaseId())
	}
	done.LeaseId = claim.GetLeaseId()
	if _, err := nodeB.ReportJob(ctx, done); code(err) != codes.NotFound {
		t.Fatalf("another tenant's node reporting: %v", err)
	}
	if r, err := nodeA.ReportJob(ctx, done); err != nil || r.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED || len(r.GetJob().GetScores()) != 2 {
		t.Fatalf("report: %v %v", r, err)
	}
	if _, err := nodeA.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: job.GetId(), LeaseId: claim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_FAILED, Error: "late"}); code(err) != codes.FailedPrecondition {
		t.Fatalf("SUCCEEDED → FAILED: %v", err)
	}
	// Bad specs name what is wrong.
	for _, bad := range []*vmafxv1.JobSpec{
		{Reference: "a.y4m", Distorted: "b.y4m", Metrics: []string{"psnr", "vmaf"}},
		{Reference: "a.y4m", Distorted: "https://x/b.y4m", Metrics: []string{"psnr"}},
		{Reference: "", Distorted: "b.y4m", Metrics: []string{"psnr"}},
		{Reference: "/a.y4m", Distorted: "b.y4m", Metrics: []string{"psnr"}},
		{Reference: "a.y4m", Distorted: "../tenant-b/b.y4m", Metrics: []string{"psnr"}},
		{Reference: "a.y4m", Distorted: "b.y4m", Metrics: []string{"psnr", "psnr"}},
	} {
		if _, err := submitterA.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: bad}); code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v", bad, err)
		}
	}
	// One log line per refusal, naming method, tenant, caller and reason,
	// never the token.
	if !strings.Contains(e.log.String(), `"caller":"dash-a"`) || !strings.Contains(e.log.String(), `"tenant":"tenant-a"`) ||
		!strings.Contains(e.log.String(), `"reason":"role_missing"`) || strings.Contains(e.log.String(), expired.Token) {
		t.Errorf("refusal log:\n%s", e.log.String())
	}
}

func (e *env) clientWithAudience(t *testing.T, tenant, aud string) vmafxv1.JobServiceClient {
	tok, err := e.idp[tenant].MintIdentity(devissuer.IdentityRequest{Subject: "x", Audiences: []string{aud}, Claims: map[string]any{"scp": controller.RoleReader}})
	if err != nil {
		t.Fatal(err)
	}
	return e.clientWith(t, tok.Token)
}

func (e *env) clientWithIssuer(t *testing.T) vmafxv1.JobServiceClient {
	other, _ := devissuertest.Serve(t, devissuer.Config{Issuer: "https://idp.tenant-c.example"})
	tok, err := other.MintIdentity(devissuer.IdentityRequest{Subject: "x", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"scp": controller.RoleReader}})
	if err != nil {
		t.Fatal(err)
	}
	return e.clientWith(t, tok.Token)
}

// reasonOf is the stable reason a refusal's ErrorInfo carries.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func requiredRole(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()["required_role"]
		}
	}
	return ""
}

// TestLeaseExpiryAndRestart: a node that stops reporting loses its job
// back to PENDING after the lease (counted), cannot report for it any more,
// and another node finishes it; a controller restart loses nothing.
func TestLeaseExpiryAndRestart(t *testing.T) {
	dir := t.TempDir()
	for name, target := range backends(t, dir) {
		t.Run(name, func(t *testing.T) { testLeaseExpiryAndRestart(t, target) })
	}
}

func testLeaseExpiryAndRestart(t *testing.T, datastore string) {
	dir := t.TempDir()
	e := startOn(t, dir, datastore)
	ctx := context.Background()
	sub, err := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter).SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	dead, alive := e.client(t, "tenant-a", "node-dead", controller.RoleNode), e.client(t, "tenant-a", "node-alive", controller.RoleNode)
	deadClaim, err := dead.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	if err != nil || deadClaim.GetJob() == nil {
		t.Fatalf("claim: %v", err)
	}
	e.clock.Store(time.Now().Add(11 * time.Second).UnixNano()) // past the lease
	reader := e.client(t, "tenant-a", "dash", controller.RoleReader)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		g, err := reader.GetJob(ctx, &vmafxv1.GetJobRequest{Id: sub.GetJob().GetId()})
		if err == nil && g.GetJob().GetState() == vmafxv1.JobState_JOB_STATE_PENDING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never went back to PENDING: %v %v", g, err)
		}
	}
	if got := metric(t, e.ctl, "vmafx_controller_lease_expiries_total"); got != 1 {
		t.Fatalf("lease expiries counted: %v", got)
	}
	if _, err := dead.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: sub.GetJob().GetId(), LeaseId: deadClaim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED,
		Scores: bothScores}); code(err) != codes.FailedPrecondition {
		t.Fatalf("the dead node reporting after losing its lease: %v", err)
	}
	c, err := alive.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	if err != nil || c.GetJob().GetNode() != "node-alive" || c.GetJob().GetAttempts() != 2 {
		t.Fatalf("second claim: %v %v", c, err)
	}
	// The dead node's lease id does not fit the new claim.
	if _, err := dead.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: sub.GetJob().GetId(), LeaseId: deadClaim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED,
		Scores: bothScores}); code(err) != codes.FailedPrecondition {
		t.Fatalf("a stale lease id: %v", err)
	}
	if _, err := alive.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: sub.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED,
		Scores: []*vmafxv1.Score{{Metric: "psnr", Mean: 30, Min: 29, Frames: 3}, {Metric: "ssim", Mean: 0.9, Min: 0.8, Frames: 3}}}); err != nil {
		t.Fatal(err)
	}
	// Restart on the same datastore: everything is there.
	e.stop()
	e2 := startOn(t, dir, datastore)
	g, err := e2.client(t, "tenant-a", "dash", controller.RoleReader).GetJob(ctx, &vmafxv1.GetJobRequest{Id: sub.GetJob().GetId()})
	if err != nil || g.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED || g.GetJob().GetScores()[0].GetMean() != 30 {
		t.Fatalf("after a restart: %v %v", g, err)
	}
}

func metric(t *testing.T, s *controller.Server, name string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0 // every label's
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

func TestTenantsFileRefusals(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"unknown key", "tenants:\n  - name: a\n    issuer: https://a\n    audiences: [x]\n    role_claim: scp\n", `unknown field "role_claim"`},
		{"key twice", "tenants:\n  - name: a\n    name: b\n    issuer: https://a\n    audiences: [x]\n", "already set"},
		{"one issuer, two tenants", "tenants:\n  - name: a\n    issuer: https://a\n    audiences: [x]\n  - name: b\n    issuer: https://a\n    audiences: [x]\n", `issuer https://a already belongs to tenant "a"`},
		{"bad name", "tenants:\n  - name: Tenant_A\n    issuer: https://a\n    audiences: [x]\n", `name "Tenant_A"`},
		{"no audiences", "tenants:\n  - name: a\n    issuer: https://a\n", "audience"},
		{"none", "tenants: []\n", "no tenants"},
		// YAML "audiences:" with nothing after it is null, not "none".
		{"a null", "tenants:\n  - name: a\n    issuer: https://a\n    audiences:\n", `null: leave the member out, or give it a value (at "/tenants/0/audiences"`},
		{"invalid UTF-8", "tenants:\n  - name: a\n    issuer: https://a\xff\n    audiences: [x]\n", "UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tenants.yaml")
			_ = os.WriteFile(p, []byte(tt.yaml), 0o600)
			if _, err := controller.LoadTenants(p); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestClaimExactlyOnce: many nodes claim concurrently through several
// stores on one datastore — three replicas on one PostgreSQL database, and
// the single SQLite file — until nothing is pending. Every job is claimed,
// and by exactly one node.
func TestClaimExactlyOnce(t *testing.T) {
	const jobs, claimersPerReplica = 300, 4
	for name, target := range backends(t, t.TempDir()) {
		t.Run(name, func(t *testing.T) {
			replicas := 3
			if name == "sqlite" {
				replicas = 1 // one controller per SQLite file
			}
			var stores []*controller.Store
			for range replicas {
				s, err := controller.OpenStore(target, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				stores = append(stores, s)
			}
			ctx := context.Background()
			want := map[string]bool{}
			for i := range jobs {
				j, err := stores[i%replicas].Submit(ctx, "tenant-a", "ci", "", spec, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				want[j.GetId()] = true
			}
			var mu sync.Mutex
			claimedBy := map[string][]string{}
			var wg sync.WaitGroup
			for r, s := range stores {
				for c := range claimersPerReplica {
					node := fmt.Sprintf("node-%d-%d", r, c)
					wg.Go(func() {
						for {
							j, _, _, err := s.Claim(ctx, "tenant-a", node, "", time.Minute)
							if err != nil {
								t.Errorf("%s: %v", node, err)
								return
							}
							if j == nil {
								return
							}
							if j.GetNode() != node || j.GetState() != vmafxv1.JobState_JOB_STATE_RUNNING {
								t.Errorf("%s claimed %s: node %q, state %s", node, j.GetId(), j.GetNode(), j.GetState())
							}
							mu.Lock()
							claimedBy[j.GetId()] = append(claimedBy[j.GetId()], node)
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			double, lost := 0, 0
			for id, nodes := range claimedBy {
				if len(nodes) > 1 {
					double++
					t.Errorf("job %s claimed by %v", id, nodes)
				}
			}
			for id := range want {
				if len(claimedBy[id]) == 0 {
					lost++
				}
			}
			t.Logf("%d jobs, %d replicas × %d claimers: %d claimed, %d double claims, %d lost", jobs, replicas, claimersPerReplica, len(claimedBy), double, lost)
			if double != 0 || lost != 0 || len(claimedBy) != jobs {
				t.Fatalf("%d double claims, %d lost, %d claimed of %d", double, lost, len(claimedBy), jobs)
			}
		})
	}
}

// TestAttemptsQueueAndCancel: a claim that ends without an outcome (lease
// lost or job given back) queues the job behind the tenant's other pending
// jobs; after --max-attempts claims it is FAILED attempts_exhausted with the
// last error; a cancelled job refuses its node's next report; report values
// that are not finite or out of range are InvalidArgument naming the field.
func TestAttemptsQueueAndCancel(t *testing.T) {
	for name, target := range backends(t, t.TempDir()) {
		t.Run(name, func(t *testing.T) { testAttemptsQueueAndCancel(t, target) })
	}
}

func testAttemptsQueueAndCancel(t *testing.T, datastore string) {
	e := startOn(t, t.TempDir(), datastore)
	ctx := context.Background()
	submitter := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter, controller.RoleReader)
	node := e.client(t, "tenant-a", "node-a1", controller.RoleNode)
	var ids []string
	for range 3 {
		sub, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sub.GetJob().GetId())
	}
	poison := ids[0]
	// The poison job is claimed first, given back, and then waits behind
	// the two submitted after it.
	c, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "pod-1"})
	if err != nil || c.GetJob().GetId() != poison || c.GetJob().GetNode() != "node-a1/pod-1" || c.GetJob().GetAttempts() != 1 {
		t.Fatalf("first claim: %v %v", c, err)
	}
	for _, bad := range []struct {
		r     *vmafxv1.ReportJobRequest
		field string
	}{
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_RUNNING, Progress: math.NaN()}, "progress"},
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_RUNNING, Progress: math.Inf(1)}, "progress"},
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_RUNNING, Progress: -5}, "progress"},
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: []*vmafxv1.Score{{Metric: "psnr", Mean: math.NaN(), Min: 1, Frames: 1}, bothScores[1]}}, "scores[0].mean"},
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: []*vmafxv1.Score{bothScores[0], {Metric: "ssim", Mean: 0.5, Min: -3, Frames: 1}}}, "scores[1].min"},
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: []*vmafxv1.Score{bothScores[0], bothScores[0]}}, "scores[1].metric"},
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: bothScores[:1]}, "scores: 1 reported"},
		{&vmafxv1.ReportJobRequest{State: vmafxv1.JobState_JOB_STATE_FAILED, Error: strings.Repeat("x", 4096)}, "error: 4096 bytes"},
	} {
		bad.r.Id, bad.r.LeaseId = poison, c.GetLeaseId()
		if _, err := node.ReportJob(ctx, bad.r); code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), bad.field) {
			t.Errorf("%s: %v", bad.field, err)
		}
	}
	giveBack := func(c *vmafxv1.ClaimJobResponse, why string) {
		t.Helper()
		if _, err := node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: c.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_PENDING, Error: why}); err != nil {
			t.Fatal(err)
		}
	}
	giveBack(c, "too slow")
	for _, want := range ids[1:] {
		c2, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
		if err != nil || c2.GetJob().GetId() != want {
			t.Fatalf("the queue behind the given-back job: claimed %v (%v); want %s", c2.GetJob().GetId(), err, want)
		}
		if _, err := node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: want, LeaseId: c2.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: bothScores}); err != nil {
			t.Fatal(err)
		}
	}
	// Attempt 2 is given back; attempt 3 loses its lease: FAILED
	// attempts_exhausted with the last error.
	c, _ = node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	giveBack(c, "too slow again")
	c, _ = node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "pod-3"})
	if c.GetJob().GetId() != poison || c.GetJob().GetAttempts() != 3 {
		t.Fatalf("third claim: %v", c)
	}
	e.clock.Store(time.Now().Add(11 * time.Second).UnixNano())
	reader := e.client(t, "tenant-a", "dash", controller.RoleReader)
	var j *vmafxv1.Job
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		g, err := reader.GetJob(ctx, &vmafxv1.GetJobRequest{Id: poison})
		if j = g.GetJob(); err == nil && j.GetState() == vmafxv1.JobState_JOB_STATE_FAILED {
			break
		}
	}
	if j.GetState() != vmafxv1.JobState_JOB_STATE_FAILED || j.GetReason() != controller.ReasonAttemptsExhausted || j.GetError() != "claimed 3 times without an outcome; the last: the lease of node-a1/pod-3 expired" {
		t.Fatalf("poison job: %v", j)
	}
	if got := metric(t, e.ctl, "vmafx_controller_attempts_exhausted_total"); got != 1 {
		t.Errorf("attempts_exhausted counted %v", got)
	}
	e.clock.Store(0)
	// Cancelling: a running job's node is refused its next report; a
	// finished job cannot be cancelled; another tenant's is NotFound.
	sub, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	c, _ = node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	if c.GetJob().GetId() != sub.GetJob().GetId() {
		t.Fatalf("claimed %v", c)
	}
	if _, err := e.client(t, "tenant-b", "ci-b", controller.RoleSubmitter).CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: sub.GetJob().GetId()}); code(err) != codes.NotFound {
		t.Fatalf("tenant B cancelling A's job: %v", err)
	}
	if _, err := reader.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: sub.GetJob().GetId()}); code(err) != codes.PermissionDenied {
		t.Fatalf("a reader cancelling: %v", err)
	}
	cj, err := submitter.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: sub.GetJob().GetId()})
	if err != nil || cj.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_CANCELLED || cj.GetJob().GetReason() != controller.ReasonCancelled {
		t.Fatalf("cancel: %v %v", cj, err)
	}
	if _, err := node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: sub.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_RUNNING, Progress: 3}); code(err) != codes.FailedPrecondition ||
		!strings.Contains(status.Convert(err).Message(), "CANCELLED") {
		t.Fatalf("the cancelled job's node reporting: %v", err)
	}
	if _, err := submitter.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: ids[1]}); code(err) != codes.FailedPrecondition {
		t.Fatalf("cancelling a finished job: %v", err)
	}
	// Every refusal above is one log line with tenant, caller and reason.
	for _, want := range []string{`"reason":"invalid_argument"`, `"reason":"job_conflict"`, `"reason":"job_not_found"`, `"caller":"node-a1"`, `"caller":"ci-b"`} {
		if !strings.Contains(e.log.String(), want) {
			t.Errorf("no refusal logged with %s", want)
		}
	}
}

// TestReflection: --grpc-reflection serves gRPC server reflection to a
// caller with the reader role (grpcurl's list), refuses it to a caller
// without a token or the role, and is off by default.
func TestReflection(t *testing.T) {
	list := func(e *env, tok string) ([]string, error) {
		conn, err := loopback.DialTLS(e.addr, e.ca.Pool(), tok)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err != nil {
			return nil, err
		}
		// A stream the server refused may end before the request is sent:
		// Send then says io.EOF, and Recv has the status.
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		return names, nil
	}
	mint := func(e *env, roles ...string) string {
		tok, err := e.idp["tenant-a"].MintIdentity(devissuer.IdentityRequest{Subject: "grpcurl", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"scp": strings.Join(roles, " ")}})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	on := startOn(t, t.TempDir(), filepath.Join(t.TempDir(), "jobs.db"), func(o *controller.Options) { o.Reflection = true })
	names, err := list(on, mint(on, controller.RoleReader))
	if err != nil || !slices.Contains(names, "vmafx.v1.JobService") {
		t.Fatalf("a reader lists %v, %v", names, err)
	}
	if _, err := list(on, mint(on, controller.RoleNode)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a node lists: %v; want PermissionDenied", err)
	}
	if _, err := list(on, ""); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v; want Unauthenticated", err)
	}
	off := startOn(t, t.TempDir(), filepath.Join(t.TempDir(), "jobs.db"))
	if _, err := list(off, mint(off, controller.RoleReader)); status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection off: %v; want Unimplemented (not served)", err)
	}
}

// TestRetriedClaimsAndReports: a claim retried with its claim_key — after
// a lost answer, or several at once — holds the one job and lease it
// leased; a key is a node's own, and free again once its claim ends; a
// final report repeated under the lease that ended the job returns the job
// as it ended, changing nothing, while another outcome or another lease is
// refused. On SQLite and PostgreSQL.
func TestRetriedClaimsAndReports(t *testing.T) {
	dir := t.TempDir()
	for name, target := range backends(t, dir) {
		t.Run(name, func(t *testing.T) { testRetriedClaimsAndReports(t, target) })
	}
}

func testRetriedClaimsAndReports(t *testing.T, datastore string) {
	e := startOn(t, t.TempDir(), datastore)
	ctx := context.Background()
	submitter := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter)
	var ids []string
	for range 4 {
		r, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetJob().GetId())
	}
	n1, n2 := e.client(t, "tenant-a", "node-1", controller.RoleNode), e.client(t, "tenant-a", "node-2", controller.RoleNode)

	// Eight claims with one key at once: one job leased, every answer it.
	answers := make([]*vmafxv1.ClaimJobResponse, 8)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i], errs[i] = n1.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{ClaimKey: "k-1"}) })
	}
	wg.Wait()
	first := answers[0]
	for i, a := range answers {
		if errs[i] != nil || a.GetJob().GetId() != ids[0] || a.GetLeaseId() != first.GetLeaseId() || a.GetJob().GetAttempts() != 1 {
			t.Fatalf("claim %d with key k-1: %v, job %s attempt %d; want %s attempt 1 under one lease", i, errs[i], a.GetJob().GetId(), a.GetJob().GetAttempts(), ids[0])
		}
	}
	if got := metric(t, e.ctl, "vmafx_controller_replays_total"); got != 7 {
		t.Errorf("replays counted: %v; want 7", got)
	}
	// Another node's claim with the same key is its own claim.
	other, err := n2.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{ClaimKey: "k-1"})
	if err != nil || other.GetJob().GetId() != ids[1] {
		t.Fatalf("node-2 with node-1's key: %v %v; want its own claim of %s", other, err, ids[1])
	}
	// Without a key, a claim is always a new one.
	plain, err := n1.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	if err != nil || plain.GetJob().GetId() != ids[2] {
		t.Fatalf("a claim without a key: %v %v", plain, err)
	}

	// The outcome, then the same outcome again: the job as it ended.
	done := &vmafxv1.ReportJobRequest{Id: ids[0], LeaseId: first.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: bothScores}
	r1, err := n1.ReportJob(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := n1.ReportJob(ctx, done)
	if err != nil || r2.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED || !r2.GetJob().GetUpdatedAt().AsTime().Equal(r1.GetJob().GetUpdatedAt().AsTime()) {
		t.Fatalf("the final report repeated: %v %v; want the job as it ended", r2, err)
	}
	if got := metric(t, e.ctl, "vmafx_controller_replays_total"); got != 8 {
		t.Errorf("replays counted: %v; want 8", got)
	}
	for name, r := range map[string]*vmafxv1.ReportJobRequest{
		"another outcome": {Id: ids[0], LeaseId: first.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_FAILED, Error: "late", Reason: "late"},
		"another lease":   {Id: ids[0], LeaseId: other.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: bothScores},
		"no lease":        {Id: ids[0], State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: bothScores},
		"progress":        {Id: ids[0], LeaseId: first.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_RUNNING},
	} {
		if _, err := n1.ReportJob(ctx, r); code(err) != codes.FailedPrecondition {
			t.Errorf("%s after the job succeeded: %v; want FailedPrecondition", name, err)
		}
	}
	// The claim ended, so its key claims anew: the last pending job.
	again, err := n1.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{ClaimKey: "k-1"})
	if err != nil || again.GetJob().GetId() != ids[3] || again.GetLeaseId() == first.GetLeaseId() {
		t.Fatalf("k-1 after its claim ended: %v %v; want a new claim of %s", again, err, ids[3])
	}
	// A key is bounded.
	if _, err := n1.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{ClaimKey: strings.Repeat("k", 129)}); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "claim_key") {
		t.Errorf("a 129-byte key: %v", err)
	}
}

// TestClaimKeyAfterItsLeaseLapsed: a node that reuses its claim key after
// the claim's lease lapsed, before the expiry pass requeued that job, gets
// a claim of its own — not Unavailable from the key's unique index (the
// probe saw 470 of 600 such claims fail with "UNIQUE constraint failed").
func TestClaimKeyAfterItsLeaseLapsed(t *testing.T) {
	for name, target := range backends(t, t.TempDir()) {
		t.Run(name, func(t *testing.T) {
			s, clock := openClocked(t, target)
			ctx := context.Background()
			for range 2 {
				if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			first, lease1, _, err := s.Claim(ctx, "tenant-a", "node-1", "k", time.Minute)
			if err != nil || first == nil {
				t.Fatalf("the first claim: %v %v", first, err)
			}
			clock.Add(int64(2 * time.Minute)) // the lease lapses; no expiry pass yet
			second, lease2, replayed, err := s.Claim(ctx, "tenant-a", "node-1", "k", time.Minute)
			if err != nil || second == nil || replayed || lease2 == lease1 {
				t.Fatalf("the key reused after its lease lapsed: job %v, replayed %t, same lease %t, %v; want a claim of its own", second, replayed, lease2 == lease1, err)
			}
			// Within the new lease, the key names the new claim.
			again, lease3, replayed, err := s.Claim(ctx, "tenant-a", "node-1", "k", time.Minute)
			if err != nil || !replayed || again.GetId() != second.GetId() || lease3 != lease2 {
				t.Fatalf("a retry within the new lease: %v replayed %t %v", again.GetId(), replayed, err)
			}
		})
	}
}

// TestNamesAndReasonsANodeMaySend: a node_name with a control or format
// character (an escape sequence, a bidirectional override) is refused at
// the API, naming the character; a node may not report FAILED with the
// controller's own reasons (cancelled, attempts_exhausted), which say
// what the controller did, not what the measurement met.
func TestNamesAndReasonsANodeMaySend(t *testing.T) {
	e := startOn(t, t.TempDir(), filepath.Join(t.TempDir(), "jobs.db"))
	ctx := context.Background()
	submitter := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter)
	if _, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	node := e.client(t, "tenant-a", "node-1", controller.RoleNode)
	for _, name := range []string{"node\x1b[31mred", "node\u202eevil", "tab\there", "del\x7f", "c1\u0085"} {
		_, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: name})
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node_name: a control or format character") {
			t.Errorf("node_name %q: %v; want InvalidArgument naming the character", name, err)
		}
	}
	c, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "gpu-node-1"})
	if err != nil || c.GetJob() == nil {
		t.Fatalf("a plain name: %v %v", c, err)
	}
	// A token that binds no pod or node name claims as its subject; the
	// name it gives is recorded under it, never as another's (on ae46db4
	// a tenant-a node's job showed whatever name it sent: node-b1).
	if got := c.GetJob().GetNode(); got != "node-1/gpu-node-1" {
		t.Fatalf("the job's node: %q; want the token's subject, then the name it gave", got)
	}
	for _, reason := range []string{controller.ReasonCancelled, controller.ReasonAttemptsExhausted} {
		_, err := node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: c.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_FAILED, Error: "x", Reason: reason})
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is the controller's own") {
			t.Errorf("FAILED %s from a node: %v; want InvalidArgument", reason, err)
		}
	}
	if _, err := node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: c.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_FAILED, Error: "x", Reason: "decode_failed"}); err != nil {
		t.Fatalf("FAILED with a reason of the node's: %v", err)
	}
}

// TestASubmitterSeesOnlyWhatItsRoleMay: a caller with vmafx:submitter alone
// may not read jobs (vmafx:reader): resubmitting a known request_id, or
// cancelling a cancelled job, answers the job's identity and state — not
// its spec, node, error or scores (before, the whole job).
func TestASubmitterSeesOnlyWhatItsRoleMay(t *testing.T) {
	e := startOn(t, t.TempDir(), filepath.Join(t.TempDir(), "jobs.db"))
	ctx := context.Background()
	submitter := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter)
	full := e.client(t, "tenant-a", "ops", controller.RoleSubmitter, controller.RoleReader)
	node := e.client(t, "tenant-a", "node-1", controller.RoleNode)
	sub, err := full.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: "nightly-1"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "node-1"})
	if err != nil || c.GetJob().GetId() != sub.GetJob().GetId() {
		t.Fatalf("claim: %v %v", c, err)
	}
	if _, err := node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: c.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED, Scores: bothScores}); err != nil {
		t.Fatal(err)
	}
	again, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: "nightly-1"})
	if err != nil {
		t.Fatal(err)
	}
	j := again.GetJob()
	if j.GetId() != sub.GetJob().GetId() || j.GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED || len(j.GetScores()) != 0 || j.GetSpec() != nil || j.GetNode() != "" {
		t.Fatalf("a submitter's resubmission of a finished job: %v; want its id and state only", j)
	}
	if r, err := full.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: "nightly-1"}); err != nil || len(r.GetJob().GetScores()) != 2 {
		t.Fatalf("a reader's resubmission: %v %v; want the whole job", r, err)
	}
	pending, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r, err := submitter.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: pending.GetJob().GetId()})
		if err != nil || r.GetJob().GetState() != vmafxv1.JobState_JOB_STATE_CANCELLED || r.GetJob().GetSpec() != nil || r.GetJob().GetSubmittedBy() != "" {
			t.Fatalf("a submitter's cancel: %v %v; want its id and state only", r, err)
		}
	}
}

// TestTenantQuotas: one tenant may not fill the datastore every tenant
// shares (the probe put 4,500 jobs in 5.9 s): past its quota of
// unfinished jobs (PENDING or RUNNING: a claimed job still counts) a
// submission is ResourceExhausted tenant_pending_quota — a retry of a
// stored submission is still answered — and past its submissions a minute
// tenant_submission_rate, saying when to retry; another tenant, with an
// override of its own, is not affected; both are counted by tenant.
func TestTenantQuotas(t *testing.T) {
	e := startOn(t, t.TempDir(), filepath.Join(t.TempDir(), "jobs.db"), func(o *controller.Options) {
		o.MaxPendingJobs, o.MaxSubmissionsPerMinute, o.TenantQuotas = 3, 7, []string{"tenant-b=10/100"}
		o.Lease = time.Hour // the minute the clock moves on expires no lease
	})
	e.clock.Store(time.Now().UnixNano())
	ctx := context.Background()
	a := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter, controller.RoleReader)
	b := e.client(t, "tenant-b", "ci-b", controller.RoleSubmitter, controller.RoleReader)
	for i := range 3 {
		if _, err := a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: fmt.Sprintf("r-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
	if code(err) != codes.ResourceExhausted || reasonOf(err) != controller.ReasonPendingQuota.String() {
		t.Fatalf("a fourth pending job: %v; want ResourceExhausted tenant_pending_quota", err)
	}
	if r, err := a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec, RequestId: "r-1"}); err != nil || r.GetJob().GetId() == "" {
		t.Fatalf("a retry of a stored submission with the quota full: %v %v", r, err)
	}
	for range 4 {
		if _, err := b.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec}); err != nil {
			t.Fatalf("tenant-b, under its own quota: %v", err)
		}
	}
	// A node claims one of tenant-a's: it is RUNNING, still unfinished,
	// so there is no room yet; once it ends there is, within the minute's
	// submissions (6 of 7 taken so far).
	node := e.client(t, "tenant-a", "node-1", controller.RoleNode)
	finishOne := func() {
		t.Helper()
		c, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "node-1"})
		if err != nil || c.GetJob() == nil {
			t.Fatalf("a claim: %v %v", c, err)
		}
		if _, err := node.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: c.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_FAILED, Error: "done"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "node-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec}); code(err) != codes.ResourceExhausted || reasonOf(err) != controller.ReasonPendingQuota.String() {
		t.Fatalf("with one of three claimed (RUNNING): %v; want ResourceExhausted tenant_pending_quota", err)
	}
	finishOne()
	if _, err := a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec}); err != nil {
		t.Fatalf("with room again: %v", err)
	}
	_, err = a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
	if code(err) != codes.ResourceExhausted || reasonOf(err) != controller.ReasonSubmissionRate.String() || !strings.Contains(err.Error(), "retry in") {
		t.Fatalf("an eighth submission in a minute: %v; want ResourceExhausted tenant_submission_rate with a delay", err)
	}
	e.clock.Add(int64(time.Minute))
	finishOne()
	if _, err := a.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec}); err != nil {
		t.Fatalf("a minute on: %v", err)
	}
	if got := metric(t, e.ctl, `vmafx_controller_quota_refusals_total`); got != 3 {
		t.Errorf("quota refusals counted: %v; want 3", got)
	}
}

// TestClaimKeysBelongToTheirToken: a claim key is scoped by the identity
// of the token that sent it, not by the node_name it claims under: another
// node's token sending the same name and key gets a claim of its own —
// never the first node's job and lease ID (before, it got both).
func TestClaimKeysBelongToTheirToken(t *testing.T) {
	e := startOn(t, t.TempDir(), filepath.Join(t.TempDir(), "jobs.db"))
	ctx := context.Background()
	submitter := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter)
	for range 2 {
		if _, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	n1, n2 := e.client(t, "tenant-a", "node-1", controller.RoleNode), e.client(t, "tenant-a", "node-2", controller.RoleNode)
	first, err := n1.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "shared", ClaimKey: "k"})
	if err != nil || first.GetJob() == nil {
		t.Fatalf("node-1's claim: %v %v", first, err)
	}
	other, err := n2.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "shared", ClaimKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if other.GetLeaseId() == first.GetLeaseId() || other.GetJob().GetId() == first.GetJob().GetId() {
		t.Fatalf("node-2 with node-1's name and key got node-1's claim (job %s, same lease %t)", other.GetJob().GetId(), other.GetLeaseId() == first.GetLeaseId())
	}
	again, err := n1.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "shared", ClaimKey: "k"})
	if err != nil || again.GetLeaseId() != first.GetLeaseId() {
		t.Fatalf("node-1's own retry: %v %v; want its claim again", again, err)
	}
	// The key is the token's, not the name's: node-1's retry under
	// another node name is its claim again (on ae46db4, a second claim).
	renamed, err := n1.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "renamed", ClaimKey: "k"})
	if err != nil || renamed.GetLeaseId() != first.GetLeaseId() {
		t.Fatalf("node-1's retry under another name: %v %v; want its claim again", renamed, err)
	}
}

// TestRequestCostIsBounded: the largest requests the limits allow —
// a submission with two 1,023-byte clip paths, a FAILED report with a
// 2 KiB error, and ListJobs of 500 such jobs — each cost at most
// maxAllocPerByte bytes allocated per request byte (a page, whose request
// is a few bytes, at most maxPageAlloc whatever it lists: its 1 MiB bound).
// docs/reliability.md lists the figures; CPU is reported, not asserted.
func TestRequestCostIsBounded(t *testing.T) {
	const maxAllocPerByte, maxPageAlloc = 256, 32 << 20
	e := startOn(t, t.TempDir(), filepath.Join(t.TempDir(), "jobs.db"))
	ctx := context.Background()
	sub := e.client(t, "tenant-a", "ci-a", controller.RoleSubmitter, controller.RoleReader)
	node := e.client(t, "tenant-a", "node-1", controller.RoleNode)
	long := &vmafxv1.JobSpec{Reference: strings.Repeat("r", 1023), Distorted: strings.Repeat("d", 1023), Metrics: []string{"psnr", "ssim"}}
	report := func(k string, req proto.Message, f func() error) {
		t.Helper()
		var err error
		bytes, cpu := cost.Of(func() { err = f() })
		size := proto.Size(req)
		per := float64(bytes) / float64(max(size, 1))
		t.Logf("%s: %d bytes asked (%v), %d allocated: %.1f a request byte, CPU %s", k, size, err, bytes, per, cpu)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if k != "ListJobs(500)" && per > maxAllocPerByte {
			t.Errorf("%s: %.1f bytes allocated a request byte; the bound is %d", k, per, maxAllocPerByte)
		}
		if k == "ListJobs(500)" && bytes > maxPageAlloc {
			t.Errorf("%s: %d bytes allocated; the bound is %d", k, bytes, maxPageAlloc)
		}
	}
	for range 499 {
		if _, err := sub.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: long}); err != nil {
			t.Fatal(err)
		}
	}
	in := &vmafxv1.SubmitJobRequest{Spec: long, RequestId: strings.Repeat("q", 128)}
	report("SubmitJob", in, func() error { _, err := sub.SubmitJob(ctx, in); return err })
	c, err := node.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	fail := &vmafxv1.ReportJobRequest{Id: c.GetJob().GetId(), LeaseId: c.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_FAILED, Error: strings.Repeat("e", 2048)}
	report("ReportJob FAILED", fail, func() error { _, err := node.ReportJob(ctx, fail); return err })
	list := &vmafxv1.ListJobsRequest{PageSize: 500}
	report("ListJobs(500)", list, func() error { _, err := sub.ListJobs(ctx, list); return err })
}

// TestPendingQuotaHoldsOnEveryPathToPending: with a quota of 3, a
// tenant's PENDING jobs never pass 3 whatever way a job becomes PENDING —
// a submission, a node giving one back, a lapsed lease, a restart of the
// controller — on both datastores: the quota counts the unfinished jobs
// (PENDING or RUNNING), which only a submission adds to. On ae46db4 the
// quota counted PENDING alone, so three claimed jobs left room for three
// more, and their lapsed leases put six back in PENDING (an outside run
// saw 49 with a quota of 20).
func TestPendingQuotaHoldsOnEveryPathToPending(t *testing.T) {
	const quota = 3
	for name, target := range backends(t, t.TempDir()) {
		t.Run(name, func(t *testing.T) {
			s, clock := openClocked(t, target)
			ctx := context.Background()
			pending := func(when string) {
				t.Helper()
				n, err := s.CountByState(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if p := n[vmafxv1.JobState_JOB_STATE_PENDING]; p > quota {
					t.Fatalf("%s: %d jobs PENDING; the quota is %d", when, p, quota)
				}
			}
			full := func(when string) {
				t.Helper()
				if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, quota, 0); !errors.Is(err, controller.ErrPendingQuota) {
					t.Fatalf("%s: a submission: %v; want ErrPendingQuota", when, err)
				}
				pending(when)
			}
			for range quota {
				if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, quota, 0); err != nil {
					t.Fatal(err)
				}
			}
			full("three submitted")
			type claim struct{ id, lease string }
			var claims []claim
			for range quota {
				j, lease, _, err := s.Claim(ctx, "tenant-a", "node-1", "", time.Minute)
				if err != nil || j == nil {
					t.Fatalf("a claim: %v %v", j, err)
				}
				claims = append(claims, claim{j.GetId(), lease})
			}
			full("three claimed (RUNNING)")
			if _, _, err := s.Report(ctx, "tenant-a", &vmafxv1.ReportJobRequest{Id: claims[0].id, LeaseId: claims[0].lease, State: vmafxv1.JobState_JOB_STATE_PENDING, Error: "given back"}, time.Minute, 5); err != nil {
				t.Fatal(err)
			}
			full("one given back")
			clock.Add(int64(2 * time.Minute))
			if requeued, _, err := s.RequeueExpired(ctx, 5); err != nil || requeued != 2 {
				t.Fatalf("the lapsed leases: %d requeued, %v; want 2", requeued, err)
			}
			full("two leases lapsed")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, _ = openClocked(t, target)
			full("a restart")
			j, lease, _, err := s.Claim(ctx, "tenant-a", "node-1", "", time.Minute)
			if err != nil || j == nil {
				t.Fatalf("a claim after the restart: %v %v", j, err)
			}
			full("one claimed after the restart")
			if _, _, err := s.Report(ctx, "tenant-a", &vmafxv1.ReportJobRequest{Id: j.GetId(), LeaseId: lease, State: vmafxv1.JobState_JOB_STATE_FAILED, Error: "done"}, time.Minute, 5); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, quota, 0); err != nil {
				t.Fatalf("one finished: a submission: %v; want room for one", err)
			}
			full("one finished, one submitted")
			if _, err := s.Submit(ctx, "tenant-b", "ci", "", spec, quota, 0); err != nil {
				t.Fatalf("another tenant: %v", err)
			}
		})
	}
}

// TestFinishedJobsExpireAndTenantsAreBounded: a finished job is deleted
// once it is older than the retention — a pending or running one never —
// and a tenant holding its bound of jobs is refused the next, another
// tenant not; both datastores.
func TestFinishedJobsExpireAndTenantsAreBounded(t *testing.T) {
	for name, target := range backends(t, t.TempDir()) {
		t.Run(name, func(t *testing.T) {
			s, clock := openClocked(t, target)
			ctx := context.Background()
			var ids []string
			for range 4 {
				j, err := s.Submit(ctx, "tenant-a", "ci", "", spec, 0, 4)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, j.GetId())
			}
			if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, 0, 4); !errors.Is(err, controller.ErrJobsQuota) {
				t.Fatalf("a fifth job with a bound of 4: %v; want ErrJobsQuota", err)
			}
			if _, err := s.Submit(ctx, "tenant-b", "ci", "", spec, 0, 4); err != nil {
				t.Fatalf("another tenant: %v", err)
			}
			// Two cancelled (finished), one running, one pending.
			for _, id := range ids[:2] {
				if _, err := s.Cancel(ctx, "tenant-a", id); err != nil {
					t.Fatal(err)
				}
			}
			if j, _, _, err := s.Claim(ctx, "tenant-a", "node-1", "", time.Hour); err != nil || j == nil {
				t.Fatalf("claim: %v %v", j, err)
			}
			// The quotas read counters the schema keeps: two jobs are
			// unfinished now (two cancelled, one claimed, one pending).
			if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, 2, 0); !errors.Is(err, controller.ErrPendingQuota) {
				t.Fatalf("a third unfinished job with a bound of 2: %v; want ErrPendingQuota", err)
			}
			if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, 3, 0); err != nil {
				t.Fatalf("a third unfinished job with a bound of 3: %v", err)
			}
			if n, err := s.DeleteFinished(ctx, time.Unix(0, clock.Load()).Add(-time.Hour), 1000); err != nil || n != 0 {
				t.Fatalf("within the retention: %d deleted, %v; want none", n, err)
			}
			clock.Add(int64(2 * time.Hour))
			if n, err := s.DeleteFinished(ctx, time.Unix(0, clock.Load()).Add(-time.Hour), 1); err != nil || n != 1 {
				t.Fatalf("past the retention, a batch of 1: %d deleted, %v", n, err)
			}
			if n, err := s.DeleteFinished(ctx, time.Unix(0, clock.Load()).Add(-time.Hour), 1000); err != nil || n != 1 {
				t.Fatalf("past the retention: %d deleted, %v; want the other cancelled one", n, err)
			}
			for i, id := range ids {
				_, err := s.Get(ctx, "tenant-a", id)
				if gone := errors.Is(err, controller.ErrNotFound); gone != (i < 2) {
					t.Errorf("job %d (%s): gone %t, %v", i, id, gone, err)
				}
			}
			// Room again for tenant-a: three jobs left, then four.
			if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, 0, 4); err != nil {
				t.Fatalf("after expiry: %v", err)
			}
			if _, err := s.Submit(ctx, "tenant-a", "ci", "", spec, 0, 4); !errors.Is(err, controller.ErrJobsQuota) {
				t.Fatalf("a fifth job again: %v; want ErrJobsQuota", err)
			}
		})
	}
}

// openClocked opens the store at target on a clock of the test's, set to
// now; the store closes with the test.
func openClocked(t *testing.T, target string) (*controller.Store, *atomic.Int64) {
	t.Helper()
	clock := &atomic.Int64{}
	clock.Store(time.Now().UnixNano())
	s, err := controller.OpenStore(target, func() time.Time { return time.Unix(0, clock.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clock
}
