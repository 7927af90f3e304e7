package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/reflection"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/foundation/window"
	"github.com/callerauth/callerauth/internal/serve"
)

// Roles.
const (
	RoleReader    = "vmafx:reader"
	RoleSubmitter = "vmafx:submitter"
	RoleNode      = "vmafx:node"
)

// MethodRoles is the role each JobService method requires. A method missing
// here is refused for everyone (and a test fails).
var MethodRoles = map[string]string{
	vmafxv1.JobService_SubmitJob_FullMethodName: RoleSubmitter,
	vmafxv1.JobService_GetJob_FullMethodName:    RoleReader,
	vmafxv1.JobService_ListJobs_FullMethodName:  RoleReader,
	vmafxv1.JobService_ClaimJob_FullMethodName:  RoleNode,
	vmafxv1.JobService_ReportJob_FullMethodName: RoleNode,
	vmafxv1.JobService_CancelJob_FullMethodName: RoleSubmitter,
}

// reflectionRoles are the roles of gRPC server reflection (--grpc-reflection):
// whoever may read jobs may read what the service offers.
var reflectionRoles = map[string]string{
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      RoleReader,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": RoleReader,
}

// Defaults.
const (
	DefaultLease      = 30 * time.Second
	DefaultLeaseCheck = time.Second
	// DefaultMaxAttempts is how many claims a job gets before it is FAILED
	// attempts_exhausted (--max-attempts).
	DefaultMaxAttempts = 3
	// DefaultMaxJobsPerTenant bounds each tenant's stored jobs
	// (--max-jobs-per-tenant); DefaultFinishedJobRetention is how long a
	// finished job is kept (--finished-job-retention).
	DefaultMaxJobsPerTenant     = 100_000
	DefaultFinishedJobRetention = 7 * 24 * time.Hour
	// DefaultTenantShare is the most of the datastore's time one tenant's
	// calls hold while another tenant is active (--tenant-share).
	DefaultTenantShare = 0.5
	// minTenantShare: below it a busy tenant would crawl.
	minTenantShare = 0.1
	// expireBatch bounds the jobs one expiry deletes in a transaction.
	expireBatch     = 1000
	maxPageSize     = 500
	defaultPageSize = 100
	// maxPageBytes bounds a ListJobs page (its jobs encoded), well under
	// gRPC's 4 MiB message limit: a page stops early rather than grow.
	maxPageBytes = 1 << 20
)

// Server is a running controller.
type Server struct {
	o         Config
	log       *slog.Logger
	store     *Store
	health    *serve.Health
	m         *serve.Manager
	guard     *guard.Guard
	grpc      *grpc.Server
	requeued  prometheus.Counter
	exhausted prometheus.Counter
	expired   prometheus.Counter
	replays   *prometheus.CounterVec
	fair      *fairGate
	lis       net.Listener
}

// Listen opens the gRPC listener (Run does when it has not been) and
// returns its address: a port 0 in --listen becomes the one the kernel
// chose.
func (s *Server) Listen() (string, error) {
	if s.lis == nil {
		lis, err := serve.ListenTCP("--listen", s.o.Serve.Listen)
		if err != nil {
			return "", fmt.Errorf("controller: %w", err)
		}
		s.lis = lis
	}
	return s.lis.Addr().String(), nil
}

// New opens the store and builds the guarded gRPC server, as c says.
func New(c Config) (*Server, error) {
	o := c
	m, err := serve.New("controller", c.Serve, c.Logger)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	m.Health().Registry.MustRegister(serve.BuildInfo("vmafx_controller"))
	s := &Server{o: o, m: m, log: m.Logger(), health: m.Health()}
	reg := s.health.Registry
	s.requeued = prometheus.NewCounter(prometheus.CounterOpts{Name: "vmafx_controller_lease_expiries_total", Help: "Running jobs returned to PENDING because their node's lease expired."})
	rpcMetrics, err := serve.NewRPCMetrics(reg, "vmafx_controller")
	if err != nil {
		return nil, err
	}
	s.exhausted = prometheus.NewCounter(prometheus.CounterOpts{Name: "vmafx_controller_attempts_exhausted_total", Help: "Jobs FAILED attempts_exhausted: claimed --max-attempts times without an outcome."})
	s.replays = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmafx_controller_replays_total",
		Help: "Retries answered with what an earlier request already did, changing nothing: a ClaimJob with the key of a live claim (rpc=claim), a final ReportJob repeated under the lease that ended the job (rpc=report)."}, []string{"rpc"})
	for _, rpc := range []string{"claim", "report"} {
		s.replays.WithLabelValues(rpc)
	}
	quotaRefusals := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmafx_controller_quota_refusals_total",
		Help: "Submissions refused by a tenant's quota, by quota (pending: --max-pending-jobs; rate: --max-submissions-per-minute; jobs: --max-jobs-per-tenant) and tenant."}, []string{"quota", "tenant"})
	s.expired = prometheus.NewCounter(prometheus.CounterOpts{Name: "vmafx_controller_jobs_expired_total", Help: "Finished jobs (SUCCEEDED, FAILED, CANCELLED) deleted --finished-job-retention after they finished."})
	q := c.Quotas
	reg.MustRegister(quotaRefusals, s.requeued, s.exhausted, s.replays, s.expired, &jobsCollector{s: s, desc: prometheus.NewDesc("vmafx_controller_jobs", "Jobs in the store, by state (every tenant).", []string{"state"}, nil)})
	roles := maps.Clone(MethodRoles)
	if o.Reflection {
		maps.Copy(roles, reflectionRoles)
	}
	s.guard, err = m.Guard(c.Callers, callers.Service{Name: "vmafx_controller",
		Rule: binding.Roles(binding.RoleConfig{Required: roles, RequireTenant: true})})
	if err != nil {
		return nil, fmt.Errorf("controller: caller authentication: %w", err)
	}
	if s.store, err = OpenStore(c.Datastore, c.Now); err != nil {
		return nil, err
	}
	s.health.AddReadyCheck("datastore", s.store.Ping)
	// The datastore's work in turn, tenant by tenant: as many calls at once
	// as it has connections (SQLite one, PostgreSQL ten), a busy tenant
	// held to its share while another is active.
	s.fair = newFairGate(s.store.db.Stats().MaxOpenConnections, cmp.Or(c.TenantShare, DefaultTenantShare), time.Now)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vmafx_controller_calls_waiting",
		Help: "Calls waiting for their tenant's turn at the datastore (every tenant's); a tenant that sends faster than it is served waits behind its own calls."},
		func() float64 { return float64(s.fair.waiting()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vmafx_controller_calls_paced_total",
			Help: "Calls of a tenant held back because its calls held the datastore more than its share (--tenant-share) while another tenant was active."},
			func() float64 { return float64(s.fair.paced.Load()) }))
	// Every stream is guarded too: the JobService has none, but server
	// reflection (--grpc-reflection) is one.
	s.grpc = grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(grpccreds.NewTLS(m.TLSConfig())),
		grpc.ChainUnaryInterceptor(rpcMetrics.Interceptor, s.guard.UnaryServerInterceptor(nil), s.fair.interceptor(), logRefusals(s.log)),
		grpc.ChainStreamInterceptor(s.guard.StreamServerInterceptor())}, m.GRPCServerOptions()...)...)
	vmafxv1.RegisterJobServiceServer(s.grpc, &Service{Store: s.store, Lease: o.Lease, MaxAttempts: o.MaxAttempts, Log: s.log, Replays: s.replays,
		Quotas: q, QuotaRefusals: quotaRefusals, Now: o.Now, MaxJobs: o.MaxJobs})
	if o.Reflection {
		reflection.Register(s.grpc)
	}
	rpcMetrics.Init(s.grpc)
	return s, nil
}

// Registry is the metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.health.Registry }

// Store is the job store.
func (s *Server) Store() *Store { return s.store }

// Run serves until ctx ends: gRPC over TLS, the metrics listener, and the
// loop that returns expired leases to PENDING.
func (s *Server) Run(ctx context.Context) (err error) {
	defer func() { err = errors.Join(err, s.store.Close()) }()
	if _, err := s.Listen(); err != nil {
		return err
	}
	s.m.ServeGRPC("grpc", s.lis, s.grpc)
	s.m.Add(serve.Named("lease expiry", serve.RunnableFunc(s.expireLeases)))
	s.m.Add(serve.Named("finished-job expiry", serve.RunnableFunc(s.expireFinished)))
	s.m.Set("address", s.lis.Addr().String(), "lease", s.o.Lease.String(), "max_attempts", s.o.MaxAttempts, "datastore", s.store.db.Target)
	if err := s.m.Run(ctx); err != nil {
		_ = s.lis.Close()
		return fmt.Errorf("controller: %w", err)
	}
	return nil
}

func (s *Server) expireLeases(ctx context.Context) error {
	t := time.NewTicker(s.o.LeaseCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			n, exhausted, err := s.store.RequeueExpired(ctx, s.o.MaxAttempts)
			if err != nil {
				s.log.Error("controller: lease expiry", "err", err)
			}
			if n+exhausted > 0 {
				s.requeued.Add(float64(n + exhausted))
				s.exhausted.Add(float64(exhausted))
				s.log.Warn("controller: leases expired; jobs back to PENDING behind their tenant's queue, or FAILED attempts_exhausted", "jobs", n, "attempts_exhausted", exhausted)
			}
		}
	}
}

// expireFinished deletes the jobs that finished --finished-job-retention
// ago, a bounded batch at a time, every tenth of the retention (at most
// every minute), until ctx ends.
func (s *Server) expireFinished(ctx context.Context) error {
	t := time.NewTicker(min(s.o.Retention/10, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			now := time.Now
			if s.o.Now != nil {
				now = s.o.Now
			}
			for ctx.Err() == nil {
				n, err := s.store.DeleteFinished(ctx, now().Add(-s.o.Retention), expireBatch)
				if err != nil {
					if ctx.Err() == nil {
						s.log.Error("controller: expiring finished jobs", "err", err)
					}
					break
				}
				s.expired.Add(float64(n))
				if n < expireBatch {
					break
				}
			}
		}
	}
}

// jobsCollector reports the jobs by state at scrape time.
type jobsCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.s.store.CountByState(ctx)
	if err != nil {
		return
	}
	for _, st := range []vmafxv1.JobState{vmafxv1.JobState_JOB_STATE_PENDING, vmafxv1.JobState_JOB_STATE_RUNNING, vmafxv1.JobState_JOB_STATE_SUCCEEDED,
		vmafxv1.JobState_JOB_STATE_FAILED, vmafxv1.JobState_JOB_STATE_CANCELLED} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[st]), stateName(st))
	}
}

func stateName(st vmafxv1.JobState) string {
	switch st {
	case vmafxv1.JobState_JOB_STATE_PENDING:
		return "pending"
	case vmafxv1.JobState_JOB_STATE_RUNNING:
		return "running"
	case vmafxv1.JobState_JOB_STATE_SUCCEEDED:
		return "succeeded"
	case vmafxv1.JobState_JOB_STATE_FAILED:
		return "failed"
	case vmafxv1.JobState_JOB_STATE_CANCELLED:
		return "cancelled"
	}
	return "unspecified"
}

// Service implements JobService on a store. The caller and its tenant come
// from the guard's verdict in the context: a request never names its tenant.
type Service struct {
	vmafxv1.UnimplementedJobServiceServer
	Store       *Store
	Lease       time.Duration
	MaxAttempts int
	Log         *slog.Logger
	// Quotas are each tenant's (zero: none); QuotaRefusals counts, by
	// quota ("pending", "rate") and tenant, the submissions refused.
	Quotas        quotas
	QuotaRefusals *prometheus.CounterVec
	Now           func() time.Time
	// MaxJobs bounds each tenant's stored jobs, in any state (0: none).
	MaxJobs int
	// submissions counts each tenant's submissions a minute; tenants are
	// the configured ones.
	submissions     *window.Counter
	submissionsOnce sync.Once
	// Replays counts, by rpc ("claim", "report"), retries answered with
	// what an earlier request already did (nil: not counted).
	Replays *prometheus.CounterVec
}

// maxTenantWindows bounds the tenants whose submissions are counted at
// once (more than any configuration names).
const maxTenantWindows = 1 << 16

// quotaRefused counts a submission refused by a quota.
func (s *Service) quotaRefused(quota, tenant string) {
	if s.QuotaRefusals != nil {
		s.QuotaRefusals.WithLabelValues(quota, tenant).Inc()
	}
}

// replayed counts one retry answered as its first time.
func (s *Service) replayed(rpc string) {
	if s.Replays != nil {
		s.Replays.WithLabelValues(rpc).Inc()
	}
}

var _ vmafxv1.JobServiceServer = (*Service)(nil)

// caller is the verified caller of the request.
func caller(ctx context.Context) (*authn.Caller, error) {
	v, ok := guard.FromContext(ctx)
	if !ok || v.Caller == nil || v.Caller.Tenant == "" {
		// The guard refuses this before a handler runs; never serve a
		// request without a tenant to scope it.
		return nil, refuse(binding.ReasonTokenMissing, "no verified caller")
	}
	return v.Caller, nil
}

func (s *Service) storeError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return refuse(ReasonJobNotFound, "job not found")
	case errors.Is(err, ErrConflict):
		return refuse(ReasonConflict, strings.TrimPrefix(err.Error(), "controller: "))
	case errors.Is(err, ErrBadPageToken):
		return refuse(ReasonInvalidArgument, err.Error())
	case errors.Is(err, errBadReport):
		return refuse(ReasonInvalidArgument, err.Error())
	default:
		if s.Log != nil {
			s.Log.ErrorContext(ctx, "controller: datastore", "err", err)
		}
		return refuse(datastore.ReasonUnavailable, "datastore unavailable; retry")
	}
}

// tracerName names the controller's spans.
const tracerName = "github.com/callerauth/callerauth/internal/services/vmafx/controller"

// endTransition ends a job transition's span with the state it left the
// job in (none when the store refused it).
func endTransition(span trace.Span, j *vmafxv1.Job, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(otelcodes.Error, "the store refused the transition")
		} else if j != nil {
			span.SetAttributes(attribute.String("vmafx.job_state", j.GetState().String()), attribute.Int64("vmafx.job_attempts", int64(j.GetAttempts())))
		}
	}
	span.End()
}

// SubmitJob implements JobService.
func (s *Service) SubmitJob(ctx context.Context, in *vmafxv1.SubmitJobRequest) (*vmafxv1.SubmitJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	spec := in.GetSpec()
	if err := CheckSpec(spec); err != nil {
		return nil, refuse(ReasonInvalidArgument, err.Error())
	}
	if len(in.GetRequestId()) > maxRequestID {
		return nil, refuse(ReasonInvalidArgument, fmt.Sprintf("request_id: %d bytes; at most %d", len(in.GetRequestId()), maxRequestID))
	}
	q := s.Quotas.of(c.Tenant)
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.submissionsOnce.Do(func() { s.submissions = window.New(time.Minute, maxTenantWindows) })
	if ok, retry := s.submissions.Take(c.Tenant, 1, q.PerMinute, now); !ok {
		s.quotaRefused("rate", c.Tenant)
		return nil, refuse(ReasonSubmissionRate, fmt.Sprintf("tenant %s has submitted %d jobs this minute, its quota; retry in %s", c.Tenant, q.PerMinute, retry.Round(time.Second)))
	}
	sctx, span := spans.Start(ctx, tracerName, "vmafx.submit")
	j, err := s.Store.Submit(sctx, c.Tenant, c.Username, in.GetRequestId(), spec, q.Pending, s.MaxJobs)
	endTransition(span, j, err)
	if errors.Is(err, ErrPendingQuota) {
		s.quotaRefused("pending", c.Tenant)
		return nil, refuse(ReasonPendingQuota, fmt.Sprintf("tenant %s has %d jobs unfinished (PENDING or RUNNING), its quota; retry once some have finished", c.Tenant, q.Pending))
	}
	if errors.Is(err, ErrJobsQuota) {
		s.quotaRefused("jobs", c.Tenant)
		return nil, refuse(ReasonJobsQuota, fmt.Sprintf("tenant %s has %d jobs stored, its bound (--max-jobs-per-tenant); retry once finished ones have expired (--finished-job-retention) or been cancelled and expired", c.Tenant, s.MaxJobs))
	}
	if err != nil {
		return nil, s.storeError(ctx, err)
	}
	return &vmafxv1.SubmitJobResponse{Job: visible(c, j)}, nil
}

// visible is what the caller may see of j: all of it with vmafx:reader;
// else — a submitter — the job's identity and where it stands (id,
// tenant, state, reason, times), not its spec, node, error or scores. A
// known request_id resubmitted, or a cancelled job cancelled again, is no
// way around the reader role.
func visible(c *authn.Caller, j *vmafxv1.Job) *vmafxv1.Job {
	if j == nil || slices.Contains(c.Roles, RoleReader) {
		return j
	}
	return &vmafxv1.Job{Id: j.GetId(), Tenant: j.GetTenant(), State: j.GetState(), Reason: j.GetReason(), CreatedAt: j.GetCreatedAt(), UpdatedAt: j.GetUpdatedAt()}
}

// GetJob implements JobService.
func (s *Service) GetJob(ctx context.Context, in *vmafxv1.GetJobRequest) (*vmafxv1.GetJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(in.GetId()); err != nil {
		return nil, err
	}
	j, err := s.Store.Get(ctx, c.Tenant, in.GetId())
	if err != nil {
		return nil, s.storeError(ctx, err)
	}
	return &vmafxv1.GetJobResponse{Job: j}, nil
}

// ListJobs implements JobService.
func (s *Service) ListJobs(ctx context.Context, in *vmafxv1.ListJobsRequest) (*vmafxv1.ListJobsResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	size := int(in.GetPageSize())
	switch {
	case size < 0 || size > maxPageSize:
		return nil, refuse(ReasonInvalidArgument, fmt.Sprintf("page_size %d: want 0 to %d", size, maxPageSize))
	case size == 0:
		size = defaultPageSize
	}
	if len(in.GetPageToken()) > 128 {
		return nil, refuse(ReasonInvalidArgument, ErrBadPageToken.Error())
	}
	jobs, next, err := s.Store.List(ctx, c.Tenant, in.GetState(), size, maxPageBytes, in.GetPageToken())
	if err != nil {
		return nil, s.storeError(ctx, err)
	}
	return &vmafxv1.ListJobsResponse{Jobs: jobs, NextPageToken: next}, nil
}

// ClaimJob implements JobService. The job's node is the claiming pod: the
// token's pod claim, else the request's node_name, else the token's
// subject.
func (s *Service) ClaimJob(ctx context.Context, in *vmafxv1.ClaimJobRequest) (*vmafxv1.ClaimJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	// The name the token binds wins over the one the request gives: a pod
	// (or, for a node-bound token, a node) claims as itself. A token that
	// binds neither claims as its subject, and the name it gives is
	// recorded under that subject ("node-a1/gpu-3"): a node's own word
	// never passes for another's name.
	node := cmp.Or(c.PodName, c.NodeName)
	if node == "" {
		node = c.Username
		if n := in.GetNodeName(); n != "" && n != c.Username {
			node = c.Username + "/" + n
		}
	}
	if len(node) > maxNodeName || !utf8.ValidString(node) {
		return nil, refuse(ReasonInvalidArgument, fmt.Sprintf("node_name: want UTF-8 of at most %d bytes", maxNodeName))
	}
	if i := strings.IndexFunc(node, unprintable); i >= 0 {
		r, _ := utf8.DecodeRuneInString(node[i:])
		return nil, refuse(ReasonInvalidArgument, fmt.Sprintf("node_name: a control or format character (U+%04X) at byte %d: names are printed to terminals", r, i))
	}
	key := in.GetClaimKey()
	if len(key) > maxRequestID {
		return nil, refuse(ReasonInvalidArgument, fmt.Sprintf("claim_key: %d bytes; at most %d", len(key), maxRequestID))
	}
	if key != "" {
		key = claimKeyOf(c, key)
	}
	sctx, span := spans.Start(ctx, tracerName, "vmafx.claim")
	j, lease, replayed, err := s.Store.Claim(sctx, c.Tenant, node, key, s.Lease)
	endTransition(span, j, err)
	if err != nil {
		return nil, s.storeError(ctx, err)
	}
	if replayed {
		s.replayed("claim")
		if s.Log != nil {
			s.Log.InfoContext(ctx, "controller: a retried claim holds its job", "job", j.GetId(), "tenant", c.Tenant, "caller", c.Username, "node", node, "attempt", j.GetAttempts())
		}
		return &vmafxv1.ClaimJobResponse{Job: j, LeaseId: lease}, nil
	}
	if j != nil && s.Log != nil {
		s.Log.InfoContext(ctx, "controller: claimed", "job", j.GetId(), "tenant", c.Tenant, "caller", c.Username, "node", node, "attempt", j.GetAttempts())
	}
	return &vmafxv1.ClaimJobResponse{Job: j, LeaseId: lease}, nil
}

// ReportJob implements JobService.
func (s *Service) ReportJob(ctx context.Context, in *vmafxv1.ReportJobRequest) (*vmafxv1.ReportJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(in.GetId()); err != nil {
		return nil, err
	}
	if err := CheckReport(in); err != nil {
		return nil, refuse(ReasonInvalidArgument, err.Error())
	}
	sctx, span := spans.Start(ctx, tracerName, "vmafx.report")
	j, replayed, err := s.Store.Report(sctx, c.Tenant, in, s.Lease, s.MaxAttempts)
	endTransition(span, j, err)
	if err != nil {
		return nil, s.storeError(ctx, err)
	}
	if replayed {
		s.replayed("report")
		if s.Log != nil {
			s.Log.InfoContext(ctx, "controller: a repeated final report changes nothing", "job", j.GetId(), "tenant", c.Tenant, "caller", c.Username, "state", j.GetState().String())
		}
	}
	return &vmafxv1.ReportJobResponse{Job: j}, nil
}

// CancelJob implements JobService.
func (s *Service) CancelJob(ctx context.Context, in *vmafxv1.CancelJobRequest) (*vmafxv1.CancelJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(in.GetId()); err != nil {
		return nil, err
	}
	sctx, span := spans.Start(ctx, tracerName, "vmafx.cancel")
	j, err := s.Store.Cancel(sctx, c.Tenant, in.GetId())
	endTransition(span, j, err)
	if err != nil {
		return nil, s.storeError(ctx, err)
	}
	if s.Log != nil {
		s.Log.InfoContext(ctx, "controller: cancelled", "job", j.GetId(), "tenant", c.Tenant, "caller", c.Username)
	}
	return &vmafxv1.CancelJobResponse{Job: visible(c, j)}, nil
}

// checkID refuses an id no job could have, without echoing it: a job id is
// a UUID.
func checkID(id string) error {
	if len(id) > 64 {
		return refuse(ReasonInvalidArgument, fmt.Sprintf("id: %d bytes; a job id is a UUID", len(id)))
	}
	return nil
}

// claimKeyOf scopes a claim key by the identity of the token that sent it
// — issuer, subject, UID and pod UID — not by the name it claims under:
// another node's token sending that node's name and key finds no claim of
// its. (Stored as a digest of the identity and the key, at most 193 bytes.)
func claimKeyOf(c *authn.Caller, key string) string {
	h := sha256.New()
	for _, f := range []string{c.Issuer, c.Username, c.UID, c.PodUID} {
		fmt.Fprintf(h, "%d:%s", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil)) + "/" + key
}

// unprintable is a character a name may not hold: a control or format
// character (an escape sequence, a bidirectional override), anything
// unicode.IsPrint refuses but the ASCII space.
func unprintable(r rune) bool { return !unicode.IsPrint(r) }
