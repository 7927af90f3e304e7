// Package cli is the callerauth command: the dev issuer, token minting and
// inspection, the job and config commands. cmd/callerauth calls [Main]
// with the demo (internal/demo), which runs the services and so sits above
// them.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/internal/foundation/version"
	"github.com/callerauth/callerauth/internal/services/vmafx/jobcli"
)

// Options are the process's surroundings, replaceable in tests.
type Options struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Now    func() time.Time
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// Lookup resolves host names; default net.DefaultResolver.LookupHost.
	Lookup Lookup
	// More are commands added to the tree, each given Stdout: the demo,
	// which runs the services and sits above them (cmd/callerauth adds
	// it).
	More []func(stdout io.Writer) *cobra.Command
}

func (o *Options) defaults() {
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
}

// Main runs the command with args, and more commands (Options.More), and
// returns the process exit code.
func Main(args []string, more ...func(stdout io.Writer) *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := &Options{More: more}
	o.defaults()
	if err := Execute(ctx, o, args); err != nil {
		code := jobcli.ExitCode(err)
		if code != jobcli.ExitInterrupted { // Ctrl-C: the user knows; quietly
			fmt.Fprintln(o.Stderr, "callerauth:", err)
		}
		return code
	}
	return 0
}

// Execute runs the command tree with args.
func Execute(ctx context.Context, o *Options, args []string) error {
	o.defaults()
	root := NewRoot(o)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// NewRoot builds the command tree.
func NewRoot(o *Options) *cobra.Command {
	o.defaults()
	root := &cobra.Command{
		Use:           "callerauth",
		Short:         "Caller authentication for Kubernetes control-plane services",
		Long:          "callerauth: who is calling a control-plane service, and may they say what they say.\n\nThe dev issuer mints Kubernetes-shaped service-account tokens and serves the\nTokenReview API, OIDC discovery and JWKS on loopback, so everything runs\nwithout a cluster.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(o.Stdin)
	root.SetOut(o.Stdout)
	root.SetErr(o.Stderr)
	root.Version = version.Get().String() // --version
	root.AddCommand(newIssuerCmd(o), newTokenCmd(o), newPublishCmd(o), newDecisionCmd(o), newDecisionsCmd(o), newDoctorCmd(o), newConfigCmd(o), jobcli.NewCommand(&jobcli.Options{Stdout: o.Stdout, Stderr: o.Stderr, Getenv: o.Getenv}),
		&cobra.Command{Use: "version", Short: "Print the build: module version, VCS revision (and whether the tree was modified), Go version", Args: cobra.NoArgs,
			RunE: func(*cobra.Command, []string) error {
				_, err := fmt.Fprintln(o.Stdout, "callerauth", version.Get().String())
				return err
			}})
	for _, m := range o.More {
		root.AddCommand(m(o.Stdout))
	}
	return root
}

// defaultStateDir is $XDG_STATE_HOME/callerauth/dev-issuer, or
// ~/.local/state/callerauth/dev-issuer.
func defaultStateDir(getenv func(string) string) string {
	base := getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return filepath.Join(os.TempDir(), "callerauth", "dev-issuer")
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "callerauth", "dev-issuer")
}
