package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/services/refresher"
)

// newTokenRefreshCmd is the token-refresher sidecar's command
// (callerauth-refresher) under callerauth token.
func newTokenRefreshCmd(o *Options) *cobra.Command {
	return refresher.NewCommand("refresh --token-url URL --client-id ID --client-secret-file FILE --out FILE",
		`  callerauth token refresh --token-url https://idp.tenant-a.example/oauth2/token --client-id node-a1 \
      --client-secret-file /etc/vmafx/client-secret --scope vmafx:node --audience vmafx-controller \
      --out /var/run/vmafx/token`, o.Stdout, o.Stderr)
}

func newIssuerClientCmd(o *Options) *cobra.Command {
	var f issuerFlags
	var c devissuer.Client
	var lifetime time.Duration
	var secretOut string
	cmd := &cobra.Command{
		Use:   "client --client-id ID --subject SUB --audience AUD [--scope S]... --secret-file FILE",
		Short: "Register an OAuth2 client for the token endpoint (client credentials)",
		Example: `  callerauth issuer client --state-dir /tmp/idp-tenant-a --client-id node-a1 --subject node-a1 \
      --scope vmafx:node --audience vmafx-controller --secret-file /tmp/node-a1.secret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			iss, err := f.openTenant(cmd, o)
			if err != nil {
				return err
			}
			secret, err := iss.AddClient(c, lifetime)
			if err != nil {
				return err
			}
			if err := pki.WriteFileAtomic(secretOut, []byte(secret+"\n"), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "client %s registered; its secret is in %s; token endpoint %s on the served issuer\n", c.ID, secretOut, devissuer.PathToken)
			return nil
		},
	}
	f.register(cmd, o)
	cmd.Flags().StringVar(&c.ID, "client-id", "", "the client id")
	cmd.Flags().StringVar(&c.Subject, "subject", "", "the sub of the tokens it gets")
	cmd.Flags().StringArrayVar(&c.Scopes, "scope", nil, "a scope it may ask for (repeatable)")
	cmd.Flags().StringArrayVar(&c.Audiences, "audience", nil, "an audience it may ask for (repeatable; the first is the default)")
	cmd.Flags().DurationVar(&lifetime, "token-lifetime", devissuer.DefaultLifetime, "lifetime of its tokens")
	cmd.Flags().StringVar(&secretOut, "secret-file", "", "where to write the client secret (mode 0600)")
	for _, name := range []string{"client-id", "subject", "audience", "secret-file"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
