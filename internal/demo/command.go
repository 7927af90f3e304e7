package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// NewCommand is `callerauth demo`, printing on stdout: cmd/callerauth adds
// it to the CLI (internal/services/cli), which sits below the services the
// demo runs and so does not import it.
func NewCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run callerauth's behaviours end to end on loopback and print what happened",
		Long: `demo starts the dev issuer and TLS gRPC and HTTP servers that record their
callers in-process on loopback, runs each scenario with the real client
packages, and prints scenario / expected / observed / verdict. It exits
non-zero if any verdict fails. No cluster is needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			results, err := Run(cmd.Context())
			if err != nil {
				return err
			}
			Print(stdout, results)
			fmt.Fprintf(stdout, "(%s)\n", time.Since(start).Round(time.Millisecond))
			if !AllPassed(results) {
				return fmt.Errorf("demo: not every scenario behaved as expected")
			}
			return nil
		},
	}
}
