package cli

// callerauth decisions: the decision log's keys (docs/decision-log.md).

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

func newDecisionsCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "decisions",
		Short: "The decision log a pdp or callerauth-proxy keeps (--decision-log): its checkpoint key",
	}
	cmd.AddCommand(newDecisionsKeygenCmd(o))
	return cmd
}

func newDecisionsKeygenCmd(o *Options) *cobra.Command {
	var origin, out string
	cmd := &cobra.Command{
		Use:   "keygen --origin ORIGIN --out FILE",
		Short: "Generate the key that signs a decision log's checkpoints (Ed25519, a signed-note key named ORIGIN; mode 0600) and print its verifier key",
		Long: "Generate the key that signs a decision log's checkpoints (C2SP tlog-checkpoint, signed notes with Ed25519), named ORIGIN, " +
			"the log's identity (a schema-less URL such as pdp.example.com/decisions). Replicas that share one log share one key. " +
			"The verifier key printed is what an auditor checks checkpoints with (golang.org/x/mod/sumdb/note).",
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if origin == "" || strings.ContainsAny(origin, " +\n") {
				return fmt.Errorf("--origin %q: want a schema-less URL with no space or plus sign, such as pdp.example.com/decisions", origin)
			}
			skey, vkey, err := note.GenerateKey(rand.Reader, origin)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("--out %s exists: a key is never overwritten", out)
			}
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintln(f, skey); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "wrote %s\nverifier key: %s\n", out, vkey)
			return nil
		},
	}
	cmd.Flags().StringVar(&origin, "origin", "", "the log's origin, the key's name: a schema-less URL such as pdp.example.com/decisions")
	cmd.Flags().StringVar(&out, "out", "", "file to write (must not exist)")
	_ = cmd.MarkFlagRequired("origin")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
