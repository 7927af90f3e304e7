package pdp

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/internal/serve"
)

// NewCommand is the pdp command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	o := defaults()
	cmd := &cobra.Command{
		Use:   "pdp",
		Short: "Policy decision point: POST /v1/check with caller authentication and signed decision records",
		Long: `pdp answers POST /v1/check with a decision record signed by its key (JWKS at
/.well-known/jwks.json). Callers authenticate with a Kubernetes service-account
token for --caller-audience, verified by TokenReview, and must be the principal
bound to the system they name (--caller-binding). See docs/pdp.md.`,
	}
	serve.Command(cmd, &o.Serve, stderr, func(*cobra.Command) (serve.Service, error) { return New(o) })
	addFlags(cmd.Flags(), &o)
	return cmd
}

func defaults() Options {
	return Options{Serve: serve.Options{Listen: ":8443", MetricsListen: "127.0.0.1:9090"},
		SignGroupMax: DefaultSignGroup, AuthZENMaxBody: DefaultAuthZENMaxBody, SearchPageSize: DefaultSearchPageSize, SearchMaxCandidates: DefaultSearchMaxCandidates}
}

func addFlags(f *pflag.FlagSet, o *Options) {
	o.Serve.AddFlags(f)
	o.Auth.AddFlags(f)
	f.BoolVar(&o.InsecureHTTP, "insecure-http", false, "serve plain HTTP instead (only on a loopback --listen): bearer tokens would otherwise cross the network in clear")
	f.StringVar(&o.PolicyDir, "policy-dir", "", "policy package: manifest.json, *.cedar, one *.cedarschema")
	f.StringVar(&o.Registry, "registry", "", "registry snapshot: a JSON array of Cedar entities")
	f.StringVar(&o.CallerAuthMode, "caller-auth-mode", ModeEnforce, "enforce, warn or off")
	f.BoolVar(&o.AllowAuthOff, "insecure-caller-auth-off", false, "allow --caller-auth-mode off: callers are not authenticated at all")
	f.StringVar(&o.CallerAudience, "caller-audience", "flex-auth", "the audience callers' tokens must be minted for")
	f.StringArrayVar(&o.CallerBindings, "caller-binding", nil, "SYSTEM=PRINCIPAL: the one principal that may represent SYSTEM (repeatable)")
	f.StringVar(&o.SigningKeyFile, "signing-key-file", "", "PEM private key(s) signing decision records; the last one signs, all are published; reloaded with the policy")
	f.StringVar(&o.AuthZENBaseURL, "authzen-base-url", "", "the https:// URL the AuthZEN metadata names as this PDP (default: the serving certificate's first name and the port served on; never the request's Host; none over plain HTTP)")
	f.IntVar(&o.SignGroupMax, "sign-group-max", o.SignGroupMax, "the most /v1/check records one signature covers: checks that arrive while one is being signed share the next, through a Merkle root (0: each record its own signature)")
	f.Int64Var(&o.AuthZENMaxBody, "authzen-max-body-bytes", o.AuthZENMaxBody, "the largest AuthZEN request body (POST /v1/check keeps its 64 KiB)")
	f.IntVar(&o.SearchPageSize, "authzen-search-page-size", o.SearchPageSize, "a search page's results when the request names no page.limit, and the most page.limit may ask")
	f.IntVar(&o.SearchMaxCandidates, "authzen-search-max-candidates", o.SearchMaxCandidates, "the candidates one search page evaluates at most; a page that reaches it ends there, with a next_token")
	f.DurationVar(&o.ReloadInterval, "reload-interval", 2*time.Second, "how often the policy, registry and signing key files are checked for a change (SIGHUP reloads at once)")
}

// ParseArgs reads a pdp command line into Options as the binary does,
// starting nothing: for what checks a rendered command line (the chart's
// tests) before a pod ever runs it. [Options.Validate] then says what the
// binary would refuse.
func ParseArgs(args []string) (Options, error) {
	o := defaults()
	f := pflag.NewFlagSet("pdp", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	addFlags(f, &o)
	if err := f.Parse(args); err != nil {
		return Options{}, fmt.Errorf("pdp: %w", err)
	}
	if f.NArg() > 0 {
		return Options{}, fmt.Errorf("pdp: unexpected arguments %q", f.Args())
	}
	return o, nil
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
