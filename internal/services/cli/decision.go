package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

func newDecisionCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{Use: "decision", Short: "Signed PDP decision records"}
	cmd.AddCommand(newDecisionCheckCmd(o), newDecisionVerifyCmd(o), newDecisionKeygenCmd(o))
	return cmd
}

func newDecisionCheckCmd(o *Options) *cobra.Command {
	var cfg credentials.Config
	var url, jwks, request string
	var maxAge, retry time.Duration
	profile := pdp.RecordProfile
	cmd := &cobra.Command{
		Use:   "check --url URL --jwks FILE|URL --request FILE [--token-file FILE] [--ca-file FILE]",
		Short: "Ask a PDP for a decision, as a fail-closed consumer does",
		Long: `check posts the request to the PDP with the caller's token (re-read from
--token-file), verifies the signed record it answers (signature, key, typ,
request digest, freshness) and prints it. It exits 0 only for a verified
allow; a verified deny, a refusal and anything unverified exit non-zero, which
a consumer reads as deny.`,
		Example: `  callerauth decision check --url https://127.0.0.1:8443/v1/check --ca-file ca.crt \
      --jwks pdp-jwks.json --token-file token --request examples/secrets-engine/check_request_allow_rotate.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := os.ReadFile(request)
			if err != nil {
				return fmt.Errorf("--request: %w", err)
			}
			cfg.TLS = strings.HasPrefix(url, "https://")
			rt, err := cfg.Transport()
			if err != nil {
				return err
			}
			c := &decision.Client{Profile: profile, URL: url, MaxAge: maxAge, HTTP: &http.Client{Transport: rt, Timeout: 30 * time.Second}}
			ctx := cmd.Context()
			var rec *decision.Record
			for deadline := time.Now().Add(retry); ; {
				if len(c.Keys.Keys) == 0 {
					c.Keys, err = readJWKSWithCA(jwks, cfg)
				}
				if err == nil {
					rec, err = c.Check(ctx, json.RawMessage(body))
				}
				if err == nil || !retryable(err) || time.Now().After(deadline) {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
			if err != nil {
				return fmt.Errorf("DENY (nothing verified): %w", err)
			}
			fmt.Fprintf(o.Stdout, "verified: effect %s, reason %s, policy %s, caller %s\n", rec.Effect, rec.Reason, rec.PolicyVersion, callerName(rec))
			if !decision.Allowed(rec, nil) {
				return fmt.Errorf("DENY: %s", rec.Reason)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "url", "", "the PDP's check endpoint, https://HOST:PORT/v1/check (required)")
	f.StringVar(&jwks, "jwks", "", "the PDP's JWKS: a file obtained out of band, or an https:// URL (required)")
	f.StringVar(&request, "request", "", "the check request, a JSON file (required)")
	f.StringVar(&cfg.TokenFile, "token-file", "", "the caller's token, re-read for every request")
	f.StringVar(&cfg.CAFile, "ca-file", "", "CA bundle for the PDP's certificate (default: the system roots)")
	f.StringVar(&cfg.ServerName, "server-name", "", "name to check the PDP's certificate against")
	f.DurationVar(&maxAge, "max-age", 5*time.Minute, "oldest acceptable record")
	addProfileFlags(f, &profile)
	f.DurationVar(&retry, "retry", 0, "keep retrying while the PDP cannot be reached or answers 503, for up to this long")
	for _, name := range []string{"url", "jwks", "request"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// retryable is a PDP not there yet: no connection, or a 503.
func retryable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || (errors.Is(err, decision.ErrRefused) && strings.Contains(err.Error(), "503"))
}

// readJWKSWithCA reads the JWKS, trusting cfg's CA for an https:// URL.
func readJWKSWithCA(src string, cfg credentials.Config) (jose.JSONWebKeySet, error) {
	if !strings.HasPrefix(src, "https://") || cfg.CAFile == "" {
		return readJWKS(src)
	}
	tlsOnly := credentials.Config{TLS: true, CAFile: cfg.CAFile, ServerName: cfg.ServerName}
	rt, err := tlsOnly.Transport()
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	return readJWKSWith(&http.Client{Transport: rt, Timeout: 10 * time.Second}, src)
}

func newDecisionVerifyCmd(o *Options) *cobra.Command {
	var jwks, request, requestID string
	var maxAge time.Duration
	var authzen bool
	profile := pdp.RecordProfile
	cmd := &cobra.Command{
		Use:   "verify --jwks FILE|URL [--request FILE] [--authzen] RESPONSE|- [RESPONSE...]",
		Short: "Verify PDP responses: signature, key, typ, request digest, freshness",
		Long: `verify checks a PDP response ({"record": ..., "record_jws": ...}) and prints
the verified record, or exactly what failed. Given several responses (stored
records re-verified for an audit, say), it checks each against the same key
set and request, prints one line per response and a count. It exits non-zero
if any fails: a consumer must read that as deny.

With --authzen, RESPONSE is what an AuthZEN endpoint answered:

  - a whole evaluations response ({"evaluations": [...]}), with --request the
    request that asked it: every answer verified on its own against its
    item (defaults applied), then the batch as a whole — one record, every
    answer at its place, the semantic and the number requested as the
    request says. It prints one line per answer and "N of M verified".
  - one answer ({"decision": ..., "context": {"callerauth": ...}}): a single
    evaluation's response, or one item of a batch, verified on its own: the
    batch's one signature and the item's inclusion proof to the signed
    Merkle root. --request is the evaluation request it answers (subject,
    action, resource and context, with the batch's defaults applied).
  - a search page ({"page": ..., "results": [...]}): its one signature binds
    the request (--request, the body sent, page.token included), the
    results, the page and the context.

--request-id insists on the X-Request-ID the record binds.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := readJWKS(jwks)
			if err != nil {
				return err
			}
			custom := cmd.Flags().Changed("schema") || cmd.Flags().Changed("typ")
			if authzen && !custom {
				profile = pdp.EvaluationProfile
			}
			opts := decision.VerifyOptions{Profile: profile, Keys: keys, MaxAge: maxAge, Now: o.Now, RequestID: requestID}
			if request != "" {
				if opts.Request, err = os.ReadFile(request); err != nil {
					return fmt.Errorf("--request: %w", err)
				}
			}
			verify := func(resp []byte) (string, []byte, error) {
				if authzen {
					var shape map[string]json.RawMessage
					_ = json.Unmarshal(resp, &shape)
					if _, ok := shape["results"]; ok {
						so := opts
						if !custom {
							so.Profile = pdp.SearchProfile
						}
						rec, err := decision.VerifySearch("", opts.Request, resp, so)
						if err != nil {
							return "", nil, err
						}
						var page struct {
							Results []json.RawMessage `json:"results"`
							Page    struct {
								NextToken string `json:"next_token"`
							} `json:"page"`
						}
						_ = json.Unmarshal(resp, &page)
						b, _ := json.MarshalIndent(rec, "", "  ")
						more := "the last page"
						if page.Page.NextToken != "" {
							more = "more pages follow"
						}
						return fmt.Sprintf("verified: %s page of %d results, %s, caller %s", rec.Endpoint, len(page.Results), more, callerOf(rec.Caller)), b, nil
					}
					if _, ok := shape["evaluations"]; ok {
						return verifyBatch(o, resp, opts)
					}
					rec, leaf, err := decision.VerifyEvaluation(resp, opts)
					if err != nil {
						return "", nil, err
					}
					b, _ := json.MarshalIndent(struct {
						Record *decision.EvaluationRecord `json:"record"`
						Leaf   *decision.EvaluationLeaf   `json:"evaluation"`
					}{rec, leaf}, "", "  ")
					return fmt.Sprintf("verified: decision %t, reason %s, evaluation %d of %d, caller %s", leaf.Decision, leaf.Reason, leaf.Index+1, rec.Evaluations, callerOf(rec.Caller)), b, nil
				}
				rec, err := decision.Verify(resp, opts)
				if err != nil {
					return "", nil, err
				}
				b, _ := json.MarshalIndent(rec, "", "  ")
				return fmt.Sprintf("verified: effect %s, reason %s, policy %s, caller %s", rec.Effect, rec.Reason, rec.PolicyVersion, callerName(rec)), b, nil
			}
			if len(args) == 1 {
				resp, err := readArg(o, args[0])
				if err != nil {
					return err
				}
				line, full, err := verify(resp)
				if err != nil {
					return fmt.Errorf("NOT VERIFIED (treat as deny): %w", err)
				}
				fmt.Fprintf(o.Stdout, "%s\n%s\n", line, full)
				return nil
			}
			var failed []string
			for _, arg := range args {
				resp, err := readArg(o, arg)
				line := ""
				if err == nil {
					line, _, err = verify(resp)
				}
				if err != nil {
					failed = append(failed, arg)
					fmt.Fprintf(o.Stdout, "%s: NOT VERIFIED (treat as deny): %v\n", arg, err)
					continue
				}
				fmt.Fprintf(o.Stdout, "%s: %s\n", arg, line)
			}
			fmt.Fprintf(o.Stdout, "%d of %d verified\n", len(args)-len(failed), len(args))
			if len(failed) > 0 {
				return fmt.Errorf("NOT VERIFIED (treat as deny): %d of %d responses: %s", len(failed), len(args), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&jwks, "jwks", "", "the PDP's JWKS: a file, or an https:// URL (required)")
	cmd.Flags().StringVar(&request, "request", "", "the request that was sent; the record must bind exactly it")
	cmd.Flags().DurationVar(&maxAge, "max-age", 5*time.Minute, "oldest acceptable record")
	cmd.Flags().BoolVar(&authzen, "authzen", false, "RESPONSE is an AuthZEN response: a whole evaluations response, one answer, or a search page (the record format defaults to the pdp's AuthZEN ones)")
	cmd.Flags().StringVar(&requestID, "request-id", "", "with --authzen: the X-Request-ID sent; the record must bind exactly it")
	addProfileFlags(cmd.Flags(), &profile)
	_ = cmd.MarkFlagRequired("jwks")
	return cmd
}

// addProfileFlags registers --schema and --typ, the record format expected;
// the defaults are the pdp's.
func addProfileFlags(f *pflag.FlagSet, p *decision.Profile) {
	f.StringVar(&p.Schema, "schema", p.Schema, "the record's expected schema member")
	f.StringVar(&p.Type, "typ", p.Type, "the record JWS's expected typ header")
}

func callerName(r *decision.Record) string { return callerOf(r.Caller) }

func callerOf(c decision.Caller) string {
	if !c.Authenticated {
		return "NOT AUTHENTICATED (" + c.Reason + ")"
	}
	return c.Principal
}

func readArg(o *Options, arg string) ([]byte, error) {
	if arg == "-" {
		return io.ReadAll(io.LimitReader(o.Stdin, 1<<20))
	}
	return os.ReadFile(arg)
}

func readJWKS(src string) (jose.JSONWebKeySet, error) {
	return readJWKSWith(&http.Client{Timeout: 10 * time.Second}, src)
}

func readJWKSWith(c *http.Client, src string) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	var b []byte
	var err error
	switch {
	case strings.HasPrefix(src, "https://"):
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
	var out, alg string
	cmd := &cobra.Command{
		Use:   "keygen --out FILE [--alg ES256|EdDSA]",
		Short: "Generate a signing key for the PDP: ECDSA P-256 (ES256, default) or Ed25519 (EdDSA); PEM, mode 0600",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := decision.GenerateKeyFileFor(jose.SignatureAlgorithm(alg), out); err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "wrote %s (%s)\n", out, alg)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write (must not exist)")
	cmd.Flags().StringVar(&alg, "alg", "ES256", "ES256 (ECDSA P-256: every JOSE library verifies it) or EdDSA (Ed25519: a check costs about 0.8x; see docs/performance.md)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// verifyBatch verifies a whole AuthZEN evaluations response against the
// request that asked it: each answer on its own, with a line each, then
// the batch as a whole.
func verifyBatch(o *Options, resp []byte, opts decision.VerifyOptions) (string, []byte, error) {
	if opts.Request == nil {
		return "", nil, errors.New("a whole evaluations response needs --request, the request that asked it")
	}
	items, _, err := decision.EvaluationItems("evaluations", opts.Request)
	if err != nil {
		return "", nil, fmt.Errorf("--request: %w", err)
	}
	var r struct {
		Evaluations []json.RawMessage `json:"evaluations"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		return "", nil, fmt.Errorf("%w: evaluations is not an array", decision.ErrUnsigned)
	}
	ok := 0
	for i, a := range r.Evaluations {
		io := opts
		if i < len(items) {
			io.Request = items[i]
		}
		_, leaf, err := decision.VerifyEvaluation(a, io)
		if err != nil {
			fmt.Fprintf(o.Stdout, "evaluation %d: NOT VERIFIED: %v\n", i+1, err)
			continue
		}
		ok++
		fmt.Fprintf(o.Stdout, "evaluation %d: decision %t, reason %s\n", i+1, leaf.Decision, leaf.Reason)
	}
	fmt.Fprintf(o.Stdout, "%d of %d verified\n", ok, len(r.Evaluations))
	rec, leaves, err := decision.VerifyEvaluations("evaluations", opts.Request, resp, opts)
	if err != nil {
		return "", nil, err
	}
	b, _ := json.MarshalIndent(struct {
		Record *decision.EvaluationRecord `json:"record"`
		Leaves []decision.EvaluationLeaf  `json:"evaluations"`
	}{rec, leaves}, "", "  ")
	return fmt.Sprintf("verified: %d of %d evaluations requested answered under %s, one record, caller %s", rec.Evaluations, rec.Requested, rec.Semantic, callerOf(rec.Caller)), b, nil
}
