package pdp

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// AddFlags registers the pdp's flags, with o's values as their defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.Serve.AddFlags(f)
	serve.AddCallerFlags(f, &o.Callers)
	f.BoolVar(&o.InsecureHTTP, "insecure-http", o.InsecureHTTP, "serve plain HTTP instead (only on a loopback --listen): bearer tokens would otherwise cross the network in clear")
	f.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "policy package: manifest.json, *.cedar, one *.cedarschema")
	f.StringVar(&o.Registry, "registry", o.Registry, "registry snapshot: a JSON array of Cedar entities")
	f.StringVar(&o.CallerAuthMode, "caller-auth-mode", o.CallerAuthMode, "enforce, warn or off")
	f.BoolVar(&o.AllowAuthOff, "insecure-caller-auth-off", o.AllowAuthOff, "allow --caller-auth-mode off: callers are not authenticated at all")
	f.StringVar(&o.CallerAudience, "caller-audience", o.CallerAudience, "the audience callers' tokens must be minted for")
	f.StringArrayVar(&o.CallerBindings, "caller-binding", o.CallerBindings, "SYSTEM=PRINCIPAL: the one principal that may represent SYSTEM (repeatable)")
	f.StringVar(&o.SigningKeyFile, "signing-key-file", o.SigningKeyFile, "PEM private key(s) signing decision records; the last one signs, all are published; reloaded with the policy")
	f.StringVar(&o.AuthZENBaseURL, "authzen-base-url", o.AuthZENBaseURL, "the https:// URL the AuthZEN metadata names as this PDP (default: the serving certificate's first name and the port served on; never the request's Host; none over plain HTTP)")
	f.IntVar(&o.SignGroupMax, "sign-group-max", o.SignGroupMax, "the most /v1/check records one signature covers: checks that arrive while one is being signed share the next, through a Merkle root (0: each record its own signature)")
	f.Int64Var(&o.AuthZENMaxBody, "authzen-max-body-bytes", o.AuthZENMaxBody, "the largest AuthZEN request body (POST /v1/check keeps its 64 KiB)")
	f.IntVar(&o.SearchPageSize, "authzen-search-page-size", o.SearchPageSize, "a search page's results when the request names no page.limit, and the most page.limit may ask")
	f.IntVar(&o.SearchMaxCandidates, "authzen-search-max-candidates", o.SearchMaxCandidates, "the candidates one search page evaluates at most; a page that reaches it ends there, with a next_token")
	f.DurationVar(&o.ReloadInterval, "reload-interval", o.ReloadInterval, "how often the policy, registry and signing key files are checked for a change (SIGHUP reloads at once)")
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
