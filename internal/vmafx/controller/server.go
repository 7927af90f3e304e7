package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/datastore"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/vmafx/measure"
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
}

// Defaults.
const (
	DefaultLease      = 30 * time.Second
	DefaultLeaseCheck = time.Second
	maxPageSize       = 500
	defaultPageSize   = 100
)

// Options configure the controller. Flags map onto them.
type Options struct {
	// Serve: --listen, --tls-*, --metrics-listen, --log-level,
	// --shutdown-timeout, --http-*.
	Serve serve.Options
	// Auth: only CacheTTL (--caller-cache-ttl) and ReviewTimeout: the
	// backend is always the tenants' identity providers.
	Auth serve.AuthOptions
	// Tenants is the tenants file (--tenants).
	Tenants string
	// Datastore is an SQLite file or a postgres:// URL (--datastore;
	// datastore.Parse).
	Datastore string
	// DatastoreURLFile, when set, holds the datastore URL instead
	// (--datastore-url-file; datastore.Resolve).
	DatastoreURLFile string
	// Lease is how long a claimed job stays with its node without a report
	// (--lease); LeaseCheck how often expired leases are looked for.
	Lease, LeaseCheck time.Duration
	Logger            *slog.Logger
	// Authenticator replaces the tenants' verifier, for tests.
	Authenticator authn.Authenticator
	// Now is the clock of leases. Default time.Now.
	Now func() time.Time
}

// Validate refuses options that cannot be honoured, naming the flag.
func (o Options) Validate() error {
	var errs []error
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Serve.Listen == "" {
		errs = append(errs, errors.New("controller: --listen is required"))
	}
	if !o.Serve.HasTLS() {
		errs = append(errs, errors.New("controller: --tls-cert-file and --tls-key-file are required: bearer tokens never travel over plaintext TCP"))
	}
	if o.Tenants == "" && o.Authenticator == nil {
		errs = append(errs, errors.New("controller: --tenants is required: the identity provider of each tenant"))
	}
	if err := datastore.Check(o.Datastore, o.DatastoreURLFile); err != nil {
		errs = append(errs, fmt.Errorf("controller: --datastore: %w", err))
	}
	if o.Lease < time.Second {
		errs = append(errs, fmt.Errorf("controller: --lease %s: want at least 1s", o.Lease))
	}
	return errors.Join(errs...)
}

// Server is a running controller.
type Server struct {
	o        Options
	log      *slog.Logger
	store    *Store
	health   *serve.Health
	certs    *serve.CertReloader
	guard    *guard.Guard
	grpc     *grpc.Server
	requeued prometheus.Counter
	lis      net.Listener
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

// New validates the options, loads the tenants, opens the store and builds
// the guarded gRPC server.
func New(o Options) (*Server, error) {
	o.Serve.Defaults()
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.LeaseCheck <= 0 {
		o.LeaseCheck = DefaultLeaseCheck
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Server{o: o, log: o.Logger, health: serve.NewHealth()}
	if s.log == nil {
		s.log = slog.Default()
	}
	auth := o.Authenticator
	if auth == nil {
		tenants, err := LoadTenants(o.Tenants)
		if err != nil {
			return nil, err
		}
		if auth, err = oidc.New(tenants.OIDC()); err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
	}
	reg := s.health.Registry
	s.requeued = prometheus.NewCounter(prometheus.CounterOpts{Name: "vmafx_controller_lease_expiries_total", Help: "Running jobs returned to PENDING because their node's lease expired."})
	rpcMetrics, err := serve.NewRPCMetrics(reg, "vmafx_controller")
	if err != nil {
		return nil, err
	}
	reg.MustRegister(s.requeued, &jobsCollector{s: s, desc: prometheus.NewDesc("vmafx_controller_jobs", "Jobs in the store, by state (every tenant).", []string{"state"}, nil)})
	s.guard, err = o.Auth.Guard(serve.GuardSpec{
		Mode: guard.Enforce, Rule: binding.Roles(binding.RoleConfig{Required: MethodRoles, RequireTenant: true}),
		Registry: reg, MetricsPrefix: "vmafx", Reasons: []string{binding.ReasonTokenMissing, "malformed_credentials", string(authn.TokenInvalid),
			string(authn.ValidatorUnavailable), string(authn.ValidatorTimeout), string(authn.ValidatorError), binding.ReasonRoleMissing, binding.ReasonTenantMissing},
		Logger: s.log, Authenticator: auth,
	})
	if err != nil {
		return nil, fmt.Errorf("controller: caller authentication: %w", err)
	}
	if s.certs, err = o.Serve.CertReloader(s.log); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	target, err := datastore.Resolve(o.Datastore, o.DatastoreURLFile)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	if s.store, err = OpenStore(target, o.Now); err != nil {
		return nil, err
	}
	s.health.AddReadyCheck("datastore", s.store.Ping)
	s.grpc = grpc.NewServer(grpc.Creds(grpccreds.NewTLS(s.certs.TLSConfig())),
		grpc.ChainUnaryInterceptor(rpcMetrics.Interceptor, s.guard.UnaryServerInterceptor(nil)))
	vmafxv1.RegisterJobServiceServer(s.grpc, &Service{Store: s.store, Lease: o.Lease})
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
	lis := s.lis
	runnables := []serve.Runnable{
		&serve.GRPCServer{Name: "grpc", Listener: lis, Server: s.grpc, ShutdownTimeout: s.o.Serve.ShutdownTimeout},
		serve.Named("lease expiry", serve.RunnableFunc(s.expireLeases)),
	}
	metrics, err := s.o.Serve.MetricsServer(s.health)
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("controller: %w", err)
	}
	metricsAddr := ""
	if metrics != nil {
		runnables = append(runnables, metrics)
		metricsAddr = metrics.Listener.Addr().String()
	}
	s.log.Info("controller: serving", "address", lis.Addr().String(), "metrics", metricsAddr, "lease", s.o.Lease.String(), "datastore", s.store.db.Target)
	if err := serve.Run(ctx, runnables...); err != nil {
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
			n, err := s.store.RequeueExpired(ctx)
			if err != nil {
				s.log.Error("controller: lease expiry", "err", err)
				continue
			}
			if n > 0 {
				s.requeued.Add(float64(n))
				s.log.Warn("controller: leases expired; jobs back to PENDING", "jobs", n)
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
	for _, st := range []vmafxv1.JobState{vmafxv1.JobState_JOB_STATE_PENDING, vmafxv1.JobState_JOB_STATE_RUNNING, vmafxv1.JobState_JOB_STATE_SUCCEEDED, vmafxv1.JobState_JOB_STATE_FAILED} {
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
	}
	return "unspecified"
}

// Service implements JobService on a store. The caller and its tenant come
// from the guard's verdict in the context: a request never names its tenant.
type Service struct {
	vmafxv1.UnimplementedJobServiceServer
	Store *Store
	Lease time.Duration
}

var _ vmafxv1.JobServiceServer = (*Service)(nil)

// caller is the verified caller of the request.
func caller(ctx context.Context) (*authn.Caller, error) {
	v, ok := guard.FromContext(ctx)
	if !ok || v.Caller == nil || v.Caller.Tenant == "" {
		// The guard refuses this before a handler runs; never serve a
		// request without a tenant to scope it.
		return nil, status.Error(codes.Unauthenticated, "no verified caller")
	}
	return v.Caller, nil
}

func storeError(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, "job not found")
	case errors.Is(err, ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, errBadToken):
		return status.Error(codes.InvalidArgument, err.Error())
	default:
		return status.Error(codes.Unavailable, "datastore unavailable; retry")
	}
}

// SubmitJob implements JobService.
func (s *Service) SubmitJob(ctx context.Context, in *vmafxv1.SubmitJobRequest) (*vmafxv1.SubmitJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	spec := in.GetSpec()
	if spec.GetReference() == "" || spec.GetDistorted() == "" {
		return nil, status.Error(codes.InvalidArgument, "spec.reference and spec.distorted are required")
	}
	for _, loc := range []string{spec.GetReference(), spec.GetDistorted()} {
		if _, err := measure.Path(loc); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if err := measure.ParseMetrics(spec.GetMetrics()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if len(in.GetRequestId()) > 128 {
		return nil, status.Error(codes.InvalidArgument, "request_id is longer than 128 bytes")
	}
	j, err := s.Store.Submit(ctx, c.Tenant, c.Username, in.GetRequestId(), spec)
	if err != nil {
		return nil, storeError(err)
	}
	return &vmafxv1.SubmitJobResponse{Job: j}, nil
}

// GetJob implements JobService.
func (s *Service) GetJob(ctx context.Context, in *vmafxv1.GetJobRequest) (*vmafxv1.GetJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	j, err := s.Store.Get(ctx, c.Tenant, in.GetId())
	if err != nil {
		return nil, storeError(err)
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
		return nil, status.Errorf(codes.InvalidArgument, "page_size %d: want 0 to %d", size, maxPageSize)
	case size == 0:
		size = defaultPageSize
	}
	jobs, next, err := s.Store.List(ctx, c.Tenant, in.GetState(), size, in.GetPageToken())
	if err != nil {
		return nil, storeError(err)
	}
	return &vmafxv1.ListJobsResponse{Jobs: jobs, NextPageToken: next}, nil
}

// ClaimJob implements JobService.
func (s *Service) ClaimJob(ctx context.Context, _ *vmafxv1.ClaimJobRequest) (*vmafxv1.ClaimJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	j, err := s.Store.Claim(ctx, c.Tenant, c.Username, s.Lease)
	if err != nil {
		return nil, storeError(err)
	}
	return &vmafxv1.ClaimJobResponse{Job: j}, nil
}

// ReportJob implements JobService.
func (s *Service) ReportJob(ctx context.Context, in *vmafxv1.ReportJobRequest) (*vmafxv1.ReportJobResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if in.GetState() == vmafxv1.JobState_JOB_STATE_FAILED && in.GetError() == "" {
		return nil, status.Error(codes.InvalidArgument, "a FAILED report needs an error message")
	}
	j, err := s.Store.Report(ctx, c.Tenant, c.Username, in, s.Lease)
	if err != nil {
		return nil, storeError(err)
	}
	return &vmafxv1.ReportJobResponse{Job: j}, nil
}
