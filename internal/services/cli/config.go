package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
)

func newConfigCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "The issuers file: check an AuthenticationConfiguration, convert the older files to one",
	}
	cmd.AddCommand(newConfigConvertCmd(o), newConfigCheckCmd(o))
	return cmd
}

func newConfigConvertCmd(o *Options) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "convert FILE",
		Short: "Write a removed issuers file (the --caller-oidc-issuers JSON, or the vmafx --tenants YAML) as a Kubernetes AuthenticationConfiguration",
		Long: `convert reads an issuers file of the older forms — the oidc backend's JSON
issuers file or the vmafx controller's tenants YAML — and writes the
AuthenticationConfiguration (apiserver.config.k8s.io/v1) that means the same
to callerauth, for --caller-authentication-config: each issuer's username is
its sub, its groups the groups claim, its tenant the extra key
callerauth.dev/tenant, its roles callerauth.dev/roles. Where the two forms
differ, a warning on standard error says how. The result is read back as
the services read it before it is written.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := olderIssuers(args[0])
			if err != nil {
				return err
			}
			doc, warnings, err := authconfig.Convert(cfg)
			for _, w := range warnings {
				fmt.Fprintln(o.Stderr, "callerauth: config convert: warning:", w)
			}
			if err != nil {
				return fmt.Errorf("config convert: %s: %w", args[0], err)
			}
			if out == "" {
				_, err = o.Stdout.Write(doc)
				return err
			}
			return pki.WriteFileAtomic(out, doc, 0o644)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the configuration to this file (default: standard output)")
	return cmd
}

// olderIssuers reads an issuers file of either older form, told apart by
// its top-level member.
func olderIssuers(path string) (oidc.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return oidc.Config{}, fmt.Errorf("config convert: %w", err)
	}
	if authconfig.Is(b) {
		return oidc.Config{}, fmt.Errorf("config convert: %s is already an AuthenticationConfiguration", path)
	}
	j, err := ijson.FromYAML(b)
	if err != nil {
		return oidc.Config{}, fmt.Errorf("config convert: %s: %w", path, err)
	}
	var tenants, issuers bool
	_ = ijson.Members(j, func(name, _ []byte) error {
		tenants = tenants || string(name) == "tenants"
		issuers = issuers || string(name) == "issuers"
		return nil
	})
	switch {
	case tenants:
		t, err := controller.LoadTenants(path)
		if err != nil {
			return oidc.Config{}, err
		}
		return t.OIDC(), nil
	case issuers:
		return oidc.LoadConfigFile(path)
	}
	return oidc.Config{}, errors.New("config convert: " + path + ": neither an issuers file (issuers: [...]) nor a tenants file (tenants: [...])")
}

func newConfigCheckCmd(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Read an AuthenticationConfiguration as the services read it, and say what each issuer gives",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := authconfig.Load(args[0])
			if err != nil {
				return fmt.Errorf("config check: %w", err)
			}
			for _, ic := range cfg.Issuers {
				tenant, constant := authconfig.ConstantExtra(ic, authconfig.ExtraTenant)
				if !constant {
					tenant = "(per token, or none)"
				}
				fmt.Fprintf(o.Stdout, "issuer %s: audiences %v, tenant %s\n", ic.Issuer, ic.Audiences, tenant)
			}
			if err := controller.CheckTenantPerIssuer(cfg); err != nil {
				fmt.Fprintf(o.Stdout, "the vmafx controller would refuse it: %v\n", err)
			} else {
				fmt.Fprintln(o.Stdout, "the vmafx controller would take it: one tenant per issuer")
			}
			return nil
		},
	}
}
