package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/internal/services/demo"
)

func newDemoCmd(o *Options) *cobra.Command {
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
			results, err := demo.Run(cmd.Context())
			if err != nil {
				return err
			}
			demo.Print(o.Stdout, results)
			fmt.Fprintf(o.Stdout, "(%s)\n", time.Since(start).Round(time.Millisecond))
			if !demo.AllPassed(results) {
				return fmt.Errorf("demo: not every scenario behaved as expected")
			}
			return nil
		},
	}
}
