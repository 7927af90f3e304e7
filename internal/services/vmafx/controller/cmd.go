package controller

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/serve"
)

// NewCommand is the vmafx-controller command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "vmafx-controller",
		Short: "The vmafx JobService: per-tenant identity providers, roles, tenant scoping",
		Long: `vmafx-controller serves JobService over gRPC with TLS. Every call is verified
offline against the identity provider of the caller's tenant
(--caller-authentication-config, a Kubernetes AuthenticationConfiguration) and
role-checked: vmafx:reader (GetJob, ListJobs), vmafx:submitter (SubmitJob,
CancelJob), vmafx:node (ClaimJob, ReportJob). See docs/vmafx.md.`,
	}
	serve.Command(cmd, &o.Serve, stderr, serve.Complete(&o, New))
	o.AddFlags(cmd.Flags())
	return cmd
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

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
