package pdp

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/internal/serve"
)

// NewCommand is the pdp command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "pdp",
		Short: "Policy decision point: POST /v1/check with caller authentication and signed decision records",
		Long: `pdp answers POST /v1/check with a decision record signed by its key (JWKS at
/.well-known/jwks.json). Callers authenticate with a Kubernetes service-account
token for --caller-audience, verified by TokenReview, and must be the principal
bound to the system they name (--caller-binding). See docs/pdp.md.`,
	}
	serve.Command(cmd, &o.Serve, stderr, serve.Complete(&o, New))
	o.AddFlags(cmd.Flags())
	return cmd
}

// ParseArgs reads a pdp command line into Options as the binary does,
// starting nothing: for what checks a rendered command line (the chart's
// tests) before a pod ever runs it. [Options.Complete] then says what the
// binary would refuse.
func ParseArgs(args []string) (Options, error) {
	o := NewOptions()
	if err := serve.ParseArgs("pdp", o.AddFlags, args); err != nil {
		return Options{}, err
	}
	return o, nil
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
