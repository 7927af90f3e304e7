package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

func newTokenCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Mint, inspect and refresh tokens"}
	cmd.AddCommand(newTokenMintCmd(o), newTokenInspectCmd(o), newTokenRefreshCmd(o))
	return cmd
}

func newTokenMintCmd(o *Options) *cobra.Command {
	var (
		f         issuerFlags
		sa        string
		audiences []string
		duration  time.Duration
		pod, node string
		output    string
		subject   string
		claims    []string
	)
	cmd := &cobra.Command{
		Use:   "mint",
		Short: "Mint a service-account token, or a tenant identity provider's token, with the dev issuer",
		Example: `  callerauth token mint --service-account vmafx:vmafx-operator --audience vmafx-controller
  callerauth token mint --service-account nvsentinel:gpu-monitor --audience platform-connector \
      --pod gpu-monitor-x2k4q --node node-a --duration 1h --output /tmp/token
  callerauth token mint --state-dir /tmp/idp-tenant-a --subject vmafx-operator --audience vmafx-controller \
      --claim scp="vmafx:reader vmafx:submitter"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if subject != "" {
				if sa != "" || pod != "" || node != "" {
					return fmt.Errorf("--subject mints an identity provider's token; --service-account, --pod and --node belong to service-account tokens")
				}
				extra := map[string]any{}
				for _, c := range claims {
					k, v, ok := strings.Cut(c, "=")
					if !ok || k == "" {
						return fmt.Errorf("--claim %q: want NAME=VALUE", c)
					}
					extra[k] = v
				}
				iss, err := f.openTenant(cmd, o)
				if err != nil {
					return err
				}
				tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: subject, Audiences: audiences, Lifetime: duration, Claims: extra})
				if err != nil {
					return err
				}
				return writeToken(o, output, tok.Token)
			}
			if len(claims) > 0 {
				return fmt.Errorf("--claim goes with --subject")
			}
			ns, name, ok := strings.Cut(sa, ":")
			if !ok || ns == "" || name == "" || strings.Contains(name, ":") {
				return fmt.Errorf("--service-account %q: want NAMESPACE:NAME", sa)
			}
			if len(audiences) == 0 {
				return fmt.Errorf("--audience is required (repeat it for several)")
			}
			iss, err := f.open(o)
			if err != nil {
				return err
			}
			tok, err := iss.Mint(devissuer.TokenRequest{
				Namespace: ns, ServiceAccount: name, Audiences: audiences,
				Lifetime: duration, Pod: pod, Node: node,
			})
			if err != nil {
				return err
			}
			return writeToken(o, output, tok.Token)
		},
	}
	f.register(cmd, o)
	cmd.Flags().StringVar(&sa, "service-account", "", "service-account token: the identity as NAMESPACE:NAME")
	cmd.Flags().StringVar(&subject, "subject", "", "an identity provider's token instead: its sub")
	cmd.Flags().StringArrayVar(&claims, "claim", nil, "with --subject: an extra claim NAME=VALUE, a string (repeatable)")
	cmd.Flags().StringArrayVar(&audiences, "audience", nil, "audience the token is for (required, repeatable)")
	cmd.Flags().DurationVar(&duration, "duration", devissuer.DefaultLifetime, "token lifetime: at least 10m, whole seconds, at most --max-token-lifetime")
	cmd.Flags().StringVar(&pod, "pod", "", "bind the token to this pod in the namespace")
	cmd.Flags().StringVar(&node, "node", "", "the node the pod runs on; without --pod, bind the token to this node")
	cmd.Flags().StringVar(&output, "output", "", "write the token to this file (mode 0600, atomically) instead of standard output")
	cmd.MarkFlagsOneRequired("service-account", "subject")
	return cmd
}

// writeToken writes a token to the output file (mode 0600, atomically), or
// to standard output.
func writeToken(o *Options, output, tok string) error {
	if output == "" || output == "-" {
		_, err := fmt.Fprintln(o.Stdout, tok)
		return err
	}
	return pki.WriteFileAtomic(output, []byte(tok+"\n"), 0o600)
}

func newTokenInspectCmd(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect [FILE|-]",
		Short: "Print a token's header and claims and when it expires, without verifying it",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			var (
				b    []byte
				err  error
				name = "standard input"
			)
			if len(args) == 0 || args[0] == "-" {
				b, err = io.ReadAll(io.LimitReader(o.Stdin, 1<<20))
			} else {
				name = args[0]
				b, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			return inspect(o.Stdout, name, strings.TrimSpace(string(b)), o.Now())
		},
	}
}

// inspect prints what a reader wants to know of a token without verifying
// it. It never prints the signature.
func inspect(w io.Writer, name, tok string, now time.Time) error {
	if tok == "" {
		return fmt.Errorf("%s holds no token", name)
	}
	parts := strings.Split(tok, ".")
	notJWT := func(why string) error {
		_, err := fmt.Fprintf(w, "%s: not a JWT (%s); callerauth sends such a token as it is, with no expiry check\n", name, why)
		return err
	}
	if len(parts) != 3 {
		return notJWT(fmt.Sprintf("%d dot-separated segments, a JWT has 3", len(parts)))
	}
	var segs [2]map[string]any
	for i, label := range []string{"header", "payload"} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			return notJWT(label + " is not base64url")
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&segs[i]); err != nil || segs[i] == nil {
			return notJWT(label + " is not a JSON object")
		}
	}
	fmt.Fprintf(w, "%s: JWT, signature NOT verified\n\nheader:\n", name)
	printJSON(w, segs[0])
	fmt.Fprintln(w, "\nclaims:")
	printJSON(w, segs[1])
	fmt.Fprintln(w)
	for _, c := range []struct{ key, label string }{{"iat", "issued"}, {"nbf", "not before"}, {"exp", "expires"}} {
		t, ok := numericDate(segs[1][c.key])
		if !ok {
			if c.key == "exp" {
				fmt.Fprintln(w, "expires:    never (no exp claim): callerauth sends it without an expiry check")
			}
			continue
		}
		fmt.Fprintf(w, "%-11s %s", c.label+":", t.Local().Format("2006-01-02 15:04:05 MST"))
		if c.key == "exp" {
			if d := t.Sub(now); d > 0 {
				fmt.Fprintf(w, " (in %s)", d.Round(time.Second))
			} else {
				fmt.Fprintf(w, " (EXPIRED %s ago: callerauth will not send it)", (-d).Round(time.Second))
			}
		}
		fmt.Fprintln(w)
	}
	return nil
}

func numericDate(v any) (time.Time, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return time.Time{}, false
	}
	f, err := n.Float64()
	if err != nil {
		return time.Time{}, false
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)), true
}

func printJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "  ", "  ")
	fmt.Fprintf(w, "  %s\n", b)
}
