package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/devissuer"
)

type issuerFlags struct {
	stateDir    string
	issuer      string
	algorithm   string
	maxLifetime time.Duration
}

func (f *issuerFlags) register(cmd *cobra.Command, o *Options) {
	cmd.Flags().StringVar(&f.stateDir, "state-dir", defaultStateDir(o.Getenv), "directory holding the issuer's keys, CA, reviewer token and registry")
	cmd.Flags().StringVar(&f.issuer, "issuer", "", "iss of minted tokens, fixed when the state directory is created (default "+devissuer.DefaultIssuer+")")
	cmd.Flags().StringVar(&f.algorithm, "algorithm", "", "signing algorithm when the key is first generated: ES256 or RS256 (default ES256)")
	cmd.Flags().DurationVar(&f.maxLifetime, "max-token-lifetime", devissuer.DefaultMaxLifetime, "longest token lifetime the issuer mints")
}

// openTenant opens the issuer for a tenant identity provider's work (a
// client, a --subject token). Without --state-dir that would be the
// default dev issuer, the cluster's stand-in, whose iss no tenant
// configuration names: refused, saying what to give instead.
func (f *issuerFlags) openTenant(cmd *cobra.Command, o *Options) (*devissuer.Issuer, error) {
	iss, err := f.open(o)
	if err != nil {
		return nil, err
	}
	if !cmd.Flags().Changed("state-dir") && iss.Issuer() == devissuer.DefaultIssuer {
		return nil, fmt.Errorf("no --state-dir: this would use the default dev issuer (%s, in %s), the cluster's stand-in; "+
			"a tenant identity provider is an issuer of its own: give its --state-dir (callerauth issuer serve --issuer https://idp.tenant-a.example --state-dir DIR --listen 127.0.0.1:PORT)",
			iss.Issuer(), f.stateDir)
	}
	return iss, nil
}

func (f *issuerFlags) open(o *Options) (*devissuer.Issuer, error) {
	alg := devissuer.Algorithm(strings.ToUpper(f.algorithm))
	if alg != "" && alg != devissuer.ES256 && alg != devissuer.RS256 {
		return nil, fmt.Errorf("--algorithm %q: want ES256 or RS256", f.algorithm)
	}
	iss, err := devissuer.Open(f.stateDir, devissuer.Config{Issuer: f.issuer, Algorithm: alg, MaxLifetime: f.maxLifetime, Now: o.Now})
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		// The directory is where the issuer keeps its keys: say which it
		// was and how to name another (a container's HOME may be / on a
		// read-only root).
		return nil, fmt.Errorf("the issuer's state directory %s: %w; give a writable --state-dir DIR (default: $XDG_STATE_HOME/callerauth/dev-issuer, else $HOME/.local/state/callerauth/dev-issuer)", f.stateDir, err)
	}
	return iss, err
}

func newIssuerCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{Use: "issuer", Short: "The embedded dev issuer"}
	cmd.AddCommand(newIssuerServeCmd(o), newIssuerCertCmd(o), newIssuerClientCmd(o), newIssuerDeletePodCmd(o), newIssuerGrantCmd(o, false), newIssuerGrantCmd(o, true))
	return cmd
}

func newIssuerServeCmd(o *Options) *cobra.Command {
	var f issuerFlags
	var listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve OIDC discovery, JWKS and the TokenReview API over HTTPS on loopback",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLoopback(listen); err != nil {
				return err
			}
			iss, err := f.open(o)
			if err != nil {
				return err
			}
			logger := slog.New(slog.NewTextHandler(o.Stderr, nil))
			srv, err := iss.Serve(listen, logger)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "dev issuer serving on %s\n  issuer:         %s\n  signing key:    %s %s\n  discovery:      %s%s\n  token (OAuth2): %s%s (clients: callerauth issuer client --state-dir %s)\n  TokenReview:    %s%s\n  CA:             %s\n  kubeconfig:     %s (reviewer token %s)\n",
				srv.URL, iss.Issuer(), iss.Algorithm(), iss.KeyID(), srv.URL, devissuer.PathDiscovery, srv.URL, devissuer.PathToken, iss.StateDir(),
				srv.URL, devissuer.PathTokenReviews, iss.CAFile(), iss.KubeconfigFile(), iss.ReviewerTokenFile())
			done := make(chan error, 1)
			go func() { done <- srv.Wait() }()
			select {
			case <-cmd.Context().Done():
				_ = srv.Close()
				return <-done
			case err := <-done:
				return err
			}
		},
	}
	f.register(cmd, o)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8443", "loopback address to serve HTTPS on (port 0 picks one)")
	return cmd
}

// checkLoopback refuses a listen address that is not on loopback: the dev
// issuer mints any identity for whoever holds the state directory and is
// not meant to be reachable from elsewhere.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q: the dev issuer listens on loopback only (127.0.0.1, ::1 or localhost)", addr)
	}
	return nil
}

func newIssuerCertCmd(o *Options) *cobra.Command {
	var f issuerFlags
	var hosts, clientGroups []string
	var outDir, clientUser string
	cmd := &cobra.Command{
		Use:   "cert --out-dir DIR [--host NAME]... | --client-user NAME [--client-group G]...",
		Short: "Write a serving or client certificate signed by the dev issuer's CA (tls.crt, tls.key)",
		Long: `cert signs a serving certificate for the hosts with the dev issuer's CA and
writes DIR/tls.crt and DIR/tls.key, for a pdp or platform-connector serving
TLS on loopback in a local walk. Clients trust it through the CA file in the
state directory (ca.crt), the same CA the dev issuer serves with.

With --client-user it writes a client certificate instead, naming the user
(its common name) and --client-group groups (its organizations), as
Kubernetes reads one: a caller of callerauth-proxy --client-ca-file
without a token.`,
		Example: `  callerauth issuer cert --state-dir /tmp/walk/issuer --out-dir /tmp/walk/pdp-tls --host 127.0.0.1 --host localhost`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			iss, err := f.open(o)
			if err != nil {
				return err
			}
			if clientUser != "" {
				if cmd.Flags().Changed("host") {
					return errors.New("--host names a serving certificate's hosts; a client certificate (--client-user) has none")
				}
				certFile, keyFile, err := iss.IssueClientCert(outDir, clientUser, clientGroups...)
				if err != nil {
					return err
				}
				fmt.Fprintf(o.Stdout, "wrote %s and %s for the client %s (CA: %s)\n", certFile, keyFile, clientUser, iss.CAFile())
				return nil
			}
			if len(clientGroups) > 0 {
				return errors.New("--client-group belongs to a client certificate: give --client-user")
			}
			certFile, keyFile, err := iss.IssueServingCert(outDir, hosts...)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "wrote %s and %s for %s (CA: %s)\n", certFile, keyFile, strings.Join(hosts, ", "), iss.CAFile())
			return nil
		},
	}
	f.register(cmd, o)
	cmd.Flags().StringArrayVar(&hosts, "host", []string{"127.0.0.1", "localhost"}, "DNS name or IP address the certificate is for (repeatable)")
	cmd.Flags().StringVar(&outDir, "out-dir", "", "directory to write tls.crt and tls.key to (required)")
	cmd.Flags().StringVar(&clientUser, "client-user", "", "write a client certificate for this username (its common name) instead of a serving one")
	cmd.Flags().StringArrayVar(&clientGroups, "client-group", nil, "with --client-user: a group of the client (an organization of the certificate; repeatable)")
	_ = cmd.MarkFlagRequired("out-dir")
	return cmd
}

func newIssuerDeletePodCmd(o *Options) *cobra.Command {
	var f issuerFlags
	cmd := &cobra.Command{
		Use:   "delete-pod NAMESPACE/NAME",
		Short: "Delete a bound pod: its tokens stop reviewing as authenticated",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ns, name, ok := strings.Cut(args[0], "/")
			if !ok || ns == "" || name == "" {
				return fmt.Errorf("pod %q: want NAMESPACE/NAME", args[0])
			}
			iss, err := f.open(o)
			if err != nil {
				return err
			}
			if err := iss.DeletePod(ns, name); err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "pod %s/%s deleted; its tokens are no longer authenticated\n", ns, name)
			return nil
		},
	}
	f.register(cmd, o)
	return cmd
}

// newIssuerGrantCmd is issuer grant, or with revoke issuer revoke: the
// grants the dev issuer's SubjectAccessReview answers from.
func newIssuerGrantCmd(o *Options, revoke bool) *cobra.Command {
	var f issuerFlags
	var g devissuer.AccessGrant
	use, short, done := "grant", "Grant a user or a group a verb on a path or a resource, as the dev issuer's SubjectAccessReview answers", "granted"
	if revoke {
		use, short, done = "revoke", "Revoke a grant made with issuer grant (the same flags)", "revoked"
	}
	cmd := &cobra.Command{
		Use:   use + " (--user NAME | --group NAME) [--verb VERB] (--path PATH | --resource RESOURCE ...)",
		Short: short,
		Long: `The dev issuer answers SubjectAccessReviews (callerauth-proxy --authorization
rbac) from the grants its state directory holds: each gives one user or
group one verb ("*": any) on a non-resource path (a prefix when it ends in
*) or on a resource (--resource, with --subresource, --namespace,
--api-group and --name; an empty --namespace or --name matches any).`,
		Example: `  callerauth issuer grant --state-dir /tmp/walk/issuer --user system:serviceaccount:demo:client --path /hello`,
		Args:    cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			iss, err := f.open(o)
			if err != nil {
				return err
			}
			if revoke {
				err = iss.Revoke(g)
			} else {
				err = iss.Grant(g)
			}
			if err != nil {
				return err
			}
			who := "user " + g.User
			if g.Group != "" {
				who = "group " + g.Group
			}
			what := g.NonResourceURL
			if what == "" {
				what = strings.Trim(g.Resource+"/"+g.Subresource, "/")
			}
			fmt.Fprintf(o.Stdout, "%s %s %s on %s\n", done, who, g.Verb, what)
			return nil
		},
	}
	f.register(cmd, o)
	fl := cmd.Flags()
	fl.StringVar(&g.User, "user", "", "the username granted (or --group)")
	fl.StringVar(&g.Group, "group", "", "the group granted (or --user)")
	fl.StringVar(&g.Verb, "verb", "get", `the verb granted: get, create, update, patch, delete, or "*"`)
	fl.StringVar(&g.NonResourceURL, "path", "", "a non-resource URL (a prefix when it ends in *)")
	fl.StringVar(&g.Resource, "resource", "", "a resource (instead of --path)")
	fl.StringVar(&g.Subresource, "subresource", "", "the resource's subresource")
	fl.StringVar(&g.Namespace, "namespace", "", "the resource's namespace (default: any)")
	fl.StringVar(&g.APIGroup, "api-group", "", "the resource's API group (default: the core group)")
	fl.StringVar(&g.Name, "name", "", "the resource's name (default: any)")
	return cmd
}
