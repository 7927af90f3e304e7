package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/serve"
)

// Options are the controller's flags. Start from [NewOptions], which
// holds every default; [Options.Complete] validates them and returns the
// [Config] that [New] reads.
type Options struct {
	// Serve: --listen, --tls-*, --metrics-listen, --log-level,
	// --shutdown-timeout, --http-*.
	Serve serve.Options
	// Callers: the shared caller-authentication settings (--caller-*). The
	// backend is always oidc, its issuers those of
	// --caller-authentication-config.
	Callers callers.Options
	// Datastore is an SQLite file or a postgres:// URL (--datastore;
	// datastore.Parse).
	Datastore string
	// DatastoreURLFile, when set, holds the datastore URL instead
	// (--datastore-url-file; datastore.Resolve).
	DatastoreURLFile string
	// Lease is how long a claimed job stays with its node without a report
	// (--lease).
	Lease time.Duration
	// MaxAttempts is how many claims a job gets (--max-attempts).
	MaxAttempts int
	// MaxPendingJobs and MaxSubmissionsPerMinute are each tenant's quota
	// (--max-pending-jobs, --max-submissions-per-minute); TenantQuotas
	// override them per tenant (--tenant-quota NAME=PENDING/PER_MINUTE).
	MaxPendingJobs, MaxSubmissionsPerMinute int
	TenantQuotas                            []string
	// MaxJobsPerTenant bounds each tenant's stored jobs, in any state
	// (--max-jobs-per-tenant); FinishedJobRetention is how long a finished
	// job (SUCCEEDED, FAILED, CANCELLED) is kept (--finished-job-retention).
	MaxJobsPerTenant     int
	FinishedJobRetention time.Duration
	// TenantShare is the most of the datastore's time one tenant's calls
	// hold while another tenant is active (--tenant-share; 1: turns only).
	TenantShare float64
	// Reflection serves gRPC server reflection (--grpc-reflection), for
	// grpcurl and the like; a caller needs the reader role.
	Reflection bool
}

// NewOptions returns the controller's defaults: the one place they are
// written. The caller backend is oidc: each tenant's identity provider,
// offline.
func NewOptions() Options {
	o := Options{Serve: serve.NewOptions(":9443", "127.0.0.1:9091").For("vmafx-controller"), Callers: callers.NewOptions(), Datastore: "/var/lib/vmafx/controller.db",
		Lease: DefaultLease, MaxAttempts: DefaultMaxAttempts, MaxPendingJobs: DefaultMaxPendingJobs, MaxSubmissionsPerMinute: DefaultMaxSubmissionsPerMinute,
		MaxJobsPerTenant: DefaultMaxJobsPerTenant, FinishedJobRetention: DefaultFinishedJobRetention, TenantShare: DefaultTenantShare}
	// Each tenant's identity provider, offline; a token for any audience
	// its issuer lists; one constant tenant per issuer; always enforced.
	o.Callers.Backend, o.Callers.AnyAudience, o.Callers.CheckIssuers = callers.BackendOIDC, true, CheckTenantPerIssuer
	return o
}

// AddFlags registers the controller's flags, with o's values as their
// defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.Serve.AddFlags(f)
	serve.RemovedFlag(f, "tenants", "the YAML tenants file")
	f.StringVar(&o.Datastore, "datastore", o.Datastore, "where jobs are stored: an SQLite file (or sqlite:///path) for one controller, or a postgres:// URL for replicas sharing one database (password from PGPASSWORD or PGPASSFILE)")
	f.StringVar(&o.DatastoreURLFile, "datastore-url-file", o.DatastoreURLFile, datastore.FileFlagHelp)
	f.DurationVar(&o.Lease, "lease", o.Lease, "how long a claimed job stays with its node without a report before it returns to PENDING")
	f.IntVar(&o.MaxAttempts, "max-attempts", o.MaxAttempts, "claims a job gets: after this many without an outcome (leases lost or jobs given back) it is FAILED attempts_exhausted")
	f.IntVar(&o.MaxPendingJobs, "max-pending-jobs", o.MaxPendingJobs, "each tenant's quota of PENDING jobs: a submission beyond is refused ResourceExhausted tenant_pending_quota (1 to 1,000,000)")
	f.IntVar(&o.MaxSubmissionsPerMinute, "max-submissions-per-minute", o.MaxSubmissionsPerMinute, "each tenant's quota of submissions a minute, per controller replica: beyond, ResourceExhausted tenant_submission_rate with the delay to retry after (1 to 1,000,000)")
	f.IntVar(&o.MaxJobsPerTenant, "max-jobs-per-tenant", o.MaxJobsPerTenant, "each tenant's jobs stored, in any state: a submission beyond is refused ResourceExhausted tenant_jobs_quota until finished ones expire (1 to 10,000,000)")
	f.DurationVar(&o.FinishedJobRetention, "finished-job-retention", o.FinishedJobRetention, "how long a finished job (SUCCEEDED, FAILED, CANCELLED) is kept for GetJob and ListJobs before it is deleted (at least 1m)")
	f.Float64Var(&o.TenantShare, "tenant-share", o.TenantShare, "while another tenant is active, the most of the datastore's time one tenant's calls may hold (measured over the last second); a tenant over it has its next call held back (0.1 to 1; 1: tenants only take turns)")
	f.StringArrayVar(&o.TenantQuotas, "tenant-quota", o.TenantQuotas, "one tenant's quotas instead of the defaults, TENANT=PENDING/PER_MINUTE (repeatable), e.g. tenant-a=5000/1200")
	f.BoolVar(&o.Reflection, "grpc-reflection", o.Reflection, "serve gRPC server reflection (for grpcurl); a caller needs the vmafx:reader role, as for GetJob")
	serve.AddCallerFlags(f, &o.Callers)
}

// Validate refuses options that cannot be honoured: what
// [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
}

// Config is the controller's completed configuration, as [New] reads it.
type Config struct {
	Serve serve.Options
	// Callers is the caller authentication (oidc).
	Callers callers.Config
	// Logger nil: JSON at --log-level on standard error.
	Logger *slog.Logger
	// Datastore is the resolved target.
	Datastore string
	// Lease, MaxAttempts, the quotas and Reflection are the flags'.
	Lease       time.Duration
	MaxAttempts int
	Quotas      quotas
	Reflection  bool
	// MaxJobs and Retention are --max-jobs-per-tenant and
	// --finished-job-retention.
	MaxJobs   int
	Retention time.Duration
	// TenantShare is --tenant-share.
	TenantShare float64
	// LeaseCheck is how often expired leases are looked for
	// (DefaultLeaseCheck); Now the clock of leases (time.Now).
	LeaseCheck time.Duration
	Now        func() time.Time
}

// Complete validates the options — refusing every one that cannot be
// honoured, naming its flag — and returns the configuration New reads.
func (o Options) Complete() (Config, error) {
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
	var callerCfg callers.Config
	switch {
	case o.Callers.Backend != callers.BackendOIDC:
		errs = append(errs, fmt.Errorf("controller: --caller-backend %s: the controller verifies each tenant's identity provider offline; want oidc", o.Callers.Backend))
	case o.Callers.AuthenticationConfig == "":
		errs = append(errs, errors.New("controller: --caller-authentication-config is required: the identity provider of each tenant"))
	default:
		var err error
		if callerCfg, err = o.Callers.Complete(); err != nil {
			errs = append(errs, err)
		}
	}
	target, err := datastore.Resolve(o.Datastore, o.DatastoreURLFile)
	if err != nil {
		errs = append(errs, fmt.Errorf("controller: %w", err))
	}
	if o.Lease < time.Second {
		errs = append(errs, fmt.Errorf("controller: --lease %s: want at least 1s", o.Lease))
	}
	if o.MaxAttempts < 1 || o.MaxAttempts > 100 {
		errs = append(errs, fmt.Errorf("controller: --max-attempts %d: want 1 to 100", o.MaxAttempts))
	}
	q, err := parseQuotas(Quota{Pending: o.MaxPendingJobs, PerMinute: o.MaxSubmissionsPerMinute}, o.TenantQuotas)
	if err != nil {
		errs = append(errs, fmt.Errorf("controller: %w", err))
	}
	if o.MaxJobsPerTenant < 1 || o.MaxJobsPerTenant > 10*maxQuota {
		errs = append(errs, fmt.Errorf("controller: --max-jobs-per-tenant %d: want 1 to %d", o.MaxJobsPerTenant, 10*maxQuota))
	}
	if o.FinishedJobRetention < time.Minute {
		errs = append(errs, fmt.Errorf("controller: --finished-job-retention %s: want at least 1m (a submitter must be able to read its job's outcome)", o.FinishedJobRetention))
	}
	if !(o.TenantShare >= minTenantShare && o.TenantShare <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("controller: --tenant-share %v: want %v to 1 (1: tenants take turns at the datastore, none is held to a share)", o.TenantShare, minTenantShare))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return Config{Serve: o.Serve, Callers: callerCfg, Datastore: target, Lease: o.Lease, MaxAttempts: o.MaxAttempts, Quotas: q,
		Reflection: o.Reflection, LeaseCheck: DefaultLeaseCheck, Now: time.Now, MaxJobs: o.MaxJobsPerTenant, Retention: o.FinishedJobRetention,
		TenantShare: o.TenantShare}, nil
}
