package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/decision"
)

func newDecisionCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{Use: "decision", Short: "Signed PDP decision records"}
	cmd.AddCommand(newDecisionVerifyCmd(o), newDecisionKeygenCmd(o))
	return cmd
}

func newDecisionVerifyCmd(o *Options) *cobra.Command {
	var jwks, request string
	var maxAge time.Duration
	cmd := &cobra.Command{
		Use:   "verify --jwks FILE|URL [--request FILE] RESPONSE|-",
		Short: "Verify a PDP response: signature, key, typ, request digest, freshness",
		Long: `verify checks a PDP response ({"record": ..., "record_jws": ...}) and prints
the verified record, or exactly what failed. It exits non-zero on any failure:
a consumer must read that as deny.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			keys, err := readJWKS(jwks)
			if err != nil {
				return err
			}
			resp, err := readArg(o, args[0])
			if err != nil {
				return err
			}
			opts := decision.VerifyOptions{Keys: keys, MaxAge: maxAge, Now: o.Now}
			if request != "" {
				if opts.Request, err = os.ReadFile(request); err != nil {
					return fmt.Errorf("--request: %w", err)
				}
			}
			rec, err := decision.Verify(resp, opts)
			if err != nil {
				return fmt.Errorf("NOT VERIFIED (treat as deny): %w", err)
			}
			b, _ := json.MarshalIndent(rec, "", "  ")
			fmt.Fprintf(o.Stdout, "verified: effect %s, reason %s, caller %s\n%s\n", rec.Effect, rec.Reason, callerName(rec), b)
			return nil
		},
	}
	cmd.Flags().StringVar(&jwks, "jwks", "", "the PDP's JWKS: a file, or an https:// URL (required)")
	cmd.Flags().StringVar(&request, "request", "", "the request that was sent; the record must bind exactly it")
	cmd.Flags().DurationVar(&maxAge, "max-age", 5*time.Minute, "oldest acceptable record")
	_ = cmd.MarkFlagRequired("jwks")
	return cmd
}

func callerName(r *decision.Record) string {
	if !r.Caller.Authenticated {
		return "NOT AUTHENTICATED (" + r.Caller.Reason + ")"
	}
	return r.Caller.Principal
}

func readArg(o *Options, arg string) ([]byte, error) {
	if arg == "-" {
		return io.ReadAll(io.LimitReader(o.Stdin, 1<<20))
	}
	return os.ReadFile(arg)
}

func readJWKS(src string) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	var b []byte
	var err error
	switch {
	case strings.HasPrefix(src, "https://"):
		c := &http.Client{Timeout: 10 * time.Second}
		resp, gerr := c.Get(src)
		if gerr != nil {
			return set, fmt.Errorf("--jwks: %w", gerr)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return set, fmt.Errorf("--jwks: GET %s: %s", src, resp.Status)
		}
		b, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	case strings.HasPrefix(src, "http://"):
		return set, fmt.Errorf("--jwks %s: keys fetched over plain HTTP prove nothing; use a file or https://", src)
	default:
		b, err = os.ReadFile(src)
	}
	if err != nil {
		return set, fmt.Errorf("--jwks: %w", err)
	}
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
		return set, fmt.Errorf("--jwks %s: not a JSON Web Key Set with keys", src)
	}
	return set, nil
}

func newDecisionKeygenCmd(o *Options) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Generate an ECDSA P-256 signing key for the PDP (PEM, mode 0600)",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := decision.GenerateKeyFile(out); err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "wrote %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write (must not exist)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
