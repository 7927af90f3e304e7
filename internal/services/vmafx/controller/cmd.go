package controller

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

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

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
