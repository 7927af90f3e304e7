package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

// newTokenRefreshCmd is the sidecar that keeps a token file current from
// an identity provider's client-credentials grant.
func newTokenRefreshCmd(o *Options) *cobra.Command {
	var (
		tokenURL, clientID, secretFile, audience, out, caFile string
		scopes                                                []string
		once                                                  bool
		renewAt                                               float64
	)
	cmd := &cobra.Command{
		Use:   "refresh --token-url URL --client-id ID --client-secret-file FILE --out FILE",
		Short: "Keep a token file current from an identity provider (OAuth2 client credentials)",
		Long: `refresh obtains a token with the OAuth2 client-credentials grant (RFC 6749
§4.4) and writes it to --out atomically, then renews it before it expires
(at --renew-at of its lifetime) and keeps running: the sidecar beside a
vmafx node or operator, whose clients read the file on every call. A failed
renewal is retried with backoff while the current token is still valid; the
file is never left half-written or emptied.`,
		Example: `  callerauth token refresh --token-url https://idp.tenant-a.example/oauth2/token --client-id node-a1 \
      --client-secret-file /etc/vmafx/client-secret --scope vmafx:node --audience vmafx-controller \
      --out /var/run/vmafx/token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := url.Parse(tokenURL)
			if err != nil || u.Scheme != "https" || u.Host == "" {
				return fmt.Errorf("--token-url %q: want an https:// URL (a client secret never travels in clear)", tokenURL)
			}
			secret, err := os.ReadFile(secretFile)
			if err != nil {
				return fmt.Errorf("--client-secret-file: %w", err)
			}
			if renewAt <= 0 || renewAt >= 1 {
				return fmt.Errorf("--renew-at %v: want a fraction of the lifetime between 0 and 1", renewAt)
			}
			hc := &http.Client{Timeout: 30 * time.Second}
			if caFile != "" {
				pem, err := os.ReadFile(caFile)
				if err != nil {
					return fmt.Errorf("--ca-file: %w", err)
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return fmt.Errorf("--ca-file %s holds no PEM certificate", caFile)
				}
				hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
			}
			cc := clientcredentials.Config{ClientID: clientID, ClientSecret: strings.TrimSpace(string(secret)), TokenURL: tokenURL,
				Scopes: scopes, AuthStyle: oauth2.AuthStyleInHeader}
			if audience != "" {
				cc.EndpointParams = url.Values{"audience": {audience}}
			}
			ctx := context.WithValue(cmd.Context(), oauth2.HTTPClient, hc)
			return refreshLoop(ctx, o, cc, out, renewAt, once)
		},
	}
	f := cmd.Flags()
	f.StringVar(&tokenURL, "token-url", "", "the identity provider's token endpoint (https)")
	f.StringVar(&clientID, "client-id", "", "the OAuth2 client id")
	f.StringVar(&secretFile, "client-secret-file", "", "file holding the client secret")
	f.StringArrayVar(&scopes, "scope", nil, "scope to ask for (repeatable; default: what the client is granted)")
	f.StringVar(&audience, "audience", "", "audience to ask for (the service the token is for)")
	f.StringVar(&out, "out", "", "the token file to keep current (written atomically, mode 0600)")
	f.StringVar(&caFile, "ca-file", "", "CA bundle for the token endpoint (default: the system roots)")
	f.Float64Var(&renewAt, "renew-at", 0.75, "renew when this fraction of the token's lifetime has passed")
	f.BoolVar(&once, "once", false, "fetch one token, write it and exit")
	for _, name := range []string{"token-url", "client-id", "client-secret-file", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func refreshLoop(ctx context.Context, o *Options, cc clientcredentials.Config, out string, renewAt float64, once bool) error {
	backoff := time.Second
	var current *oauth2.Token
	for {
		tok, err := cc.Token(ctx)
		if err == nil {
			if err = pki.WriteFileAtomic(out, []byte(tok.AccessToken+"\n"), 0o600); err == nil {
				current, backoff = tok, time.Second
				fmt.Fprintf(o.Stdout, "wrote %s, expires %s\n", out, tok.Expiry.UTC().Format(time.RFC3339))
			}
		}
		if err != nil {
			var re *oauth2.RetrieveError
			if errors.As(err, &re) && (re.ErrorCode == "invalid_client" || re.ErrorCode == "invalid_scope" || re.ErrorCode == "unauthorized_client") {
				return fmt.Errorf("token refresh: the identity provider refuses this client: %w", err) // retrying will not help
			}
			if once {
				return fmt.Errorf("token refresh: %w", err)
			}
			fmt.Fprintf(o.Stderr, "token refresh: %v; retrying in %s\n", err, backoff)
		}
		if once && err == nil {
			return nil
		}
		wait := backoff
		if err == nil {
			wait = time.Duration(float64(time.Until(current.Expiry)) * renewAt)
			if current.Expiry.IsZero() || wait < time.Second {
				wait = time.Second
			}
		} else {
			backoff = min(2*backoff, time.Minute)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
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
