// Package refresher is the token-refresher sidecar: it keeps a token file
// current from an identity provider's OAuth2 client-credentials grant
// (RFC 6749 §4.4), for a client that reads the file on every call (the
// vmafx node and operator with credentials.mode: refresher). It is its
// own binary and image, callerauth-refresher, linking nothing else of
// callerauth; `callerauth token refresh` is the same command.
//
// Its start-up has every service's shape: [NewOptions], [Options.AddFlags],
// [Options.Complete] (which validates) → [Config] → [Run].
package refresher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/foundation/version"
)

// Limits.
const (
	// MaxSecretBytes bounds the client secret file.
	MaxSecretBytes = 4 << 10
	// requestTimeout bounds one call to the token endpoint.
	requestTimeout = 30 * time.Second
	// maxBackoff is the longest wait between failed renewals.
	maxBackoff = time.Minute
)

// Run fetches a token, writes it, and renews it at c's fraction of its
// lifetime until ctx ends (or once, with --once). A failed renewal is
// retried with backoff (1 s doubling to a minute) while the file keeps
// the last token; an identity provider that refuses the client
// (invalid_client, invalid_scope, unauthorized_client) ends it.
func Run(ctx context.Context, c Config, stdout, stderr io.Writer) error {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, c.client)
	backoff := time.Second
	var current *oauth2.Token
	for {
		tok, err := c.grant.Token(ctx)
		if err == nil {
			if err = pki.WriteFileAtomic(c.out, []byte(tok.AccessToken+"\n"), 0o600); err == nil {
				current, backoff = tok, time.Second
				fmt.Fprintf(stdout, "wrote %s, expires %s\n", c.out, tok.Expiry.UTC().Format(time.RFC3339))
			}
		}
		if err != nil {
			var re *oauth2.RetrieveError
			if errors.As(err, &re) && (re.ErrorCode == "invalid_client" || re.ErrorCode == "invalid_scope" || re.ErrorCode == "unauthorized_client") {
				return fmt.Errorf("token refresh: the identity provider refuses this client: %w", err) // retrying will not help
			}
			if c.once {
				return fmt.Errorf("token refresh: %w", err)
			}
			fmt.Fprintf(stderr, "token refresh: %v; retrying in %s\n", err, backoff)
		}
		if c.once && err == nil {
			return nil
		}
		wait := backoff
		if err == nil {
			wait = time.Duration(float64(time.Until(current.Expiry)) * c.renewAt)
			if current.Expiry.IsZero() || wait < time.Second {
				wait = time.Second
			}
		} else {
			backoff = min(2*backoff, maxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Long is the command's description, shared by callerauth-refresher and
// `callerauth token refresh`.
const Long = `refresh obtains a token with the OAuth2 client-credentials grant (RFC 6749
§4.4) and writes it to --out atomically, then renews it before it expires
(at --renew-at of its lifetime) and keeps running: the sidecar beside a
vmafx node or operator, whose clients read the file on every call. A failed
renewal is retried with backoff while the current token is still valid; the
file is never left half-written or emptied.`

// NewCommand is the refresher as a command named use (its usage line),
// writing to stdout and stderr.
func NewCommand(use, example string, stdout, stderr io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:          use,
		Short:        "Keep a token file current from an identity provider (OAuth2 client credentials)",
		Long:         Long,
		Example:      example,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.Complete()
			if err != nil {
				return err
			}
			return Run(cmd.Context(), c, stdout, stderr)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// Main runs callerauth-refresher with args and returns the exit code.
func Main(ctx context.Context, args []string) int {
	cmd := NewCommand("callerauth-refresher --token-url URL --client-id ID --client-secret-file FILE --out FILE",
		`  callerauth-refresher --token-url https://idp.tenant-a.example/oauth2/token --client-id node-a1 \
      --client-secret-file /etc/vmafx/client-secret --scope vmafx:node --audience vmafx-controller \
      --out /var/run/vmafx/token`, os.Stdout, os.Stderr)
	cmd.Version = version.Get().String()
	cmd.SetArgs(args)
	cmd.SilenceErrors = true
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "callerauth-refresher:", err)
		return 1
	}
	return 0
}
