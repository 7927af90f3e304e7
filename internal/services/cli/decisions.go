package cli

// callerauth decisions: the decision log a pdp keeps — its checkpoint
// key, and reading it as an auditor does (docs/decision-log.md).

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/fsutil"
	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
)

func newDecisionsCmd(o *Options) *cobra.Command {
	f := &decisionsFlags{}
	cmd := &cobra.Command{
		Use:   "decisions",
		Short: "The decision log a pdp or callerauth-proxy keeps (--decision-log): its checkpoint key; search, tail, show with its proof, verify the log grew and was witnessed, write a decision's proof",
		Long: `The reading commands call the pdp's read API (GET /v1/decisions…) with the
one credentials package: the "decisions" section of --config (address, tls,
ca_file, server_name, token_file, token) and the DECISIONS_* variables over
it. The token must be one the pdp lets read its log: the principal bound to
callerauth/decision-log. show and verify check what the pdp answers with the
log's verifier key (--verifier-key, printed by checkpoint-key), using
golang.org/x/mod's note and tlog, not the pdp's word.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.config, "config", "", "YAML file with a decisions section (address: the pdp's host:port, tls, ca_file, server_name, token_file)")
	pf.StringVarP(&f.output, "output", "o", "table", "table or json")
	pf.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long one call may take")
	cmd.AddCommand(newDecisionsCheckpointKeyCmd(o, "checkpoint-key"), newDecisionsCheckpointKeyCmd(o, "keygen"), newDecisionsReplicaKeyCmd(o), newDecisionsSearchCmd(o, f), newDecisionsTailCmd(o, f), newDecisionsShowCmd(o, f), newDecisionsVerifyCmd(o, f), newDecisionsProofCmd(o, f))
	return cmd
}

// decisionsFlags are the flags the reading commands share.
type decisionsFlags struct {
	config, output string
	timeout        time.Duration
	client         *http.Client
	base           string
}

// connect loads the connection and checks the flags.
func (f *decisionsFlags) connect(o *Options) error {
	if f.output != "table" && f.output != "json" {
		return fmt.Errorf("--output %q: want table or json", f.output)
	}
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", f.timeout)
	}
	opts := []credentials.LoadOption{credentials.FromEnv("DECISIONS_"), credentials.WithLookupEnv(func(k string) (string, bool) {
		v := o.Getenv(k)
		return v, v != ""
	})}
	if f.config != "" {
		opts = append(opts, credentials.FromFile(f.config))
	}
	cfg, err := credentials.Load("decisions", opts...)
	if err != nil {
		return fmt.Errorf("decisions: the pdp connection: %w", err)
	}
	if cfg.Address == "" {
		return errors.New("decisions: no address: set the decisions section's address (the pdp's host:port) in --config, or DECISIONS_ADDRESS")
	}
	rt, err := cfg.Transport()
	if err != nil {
		return fmt.Errorf("decisions: %w", err)
	}
	f.client = &http.Client{Transport: rt, Timeout: f.timeout}
	f.base = "https://" + cfg.Address
	if !cfg.TLS {
		f.base = "http://" + cfg.Address
	}
	if credentials.IsUnixAddress(cfg.Address) {
		f.base = "http://unix"
	}
	return nil
}

// get asks the read API for path and decodes its JSON answer into v.
func (f *decisionsFlags) get(ctx context.Context, path string, v any) error {
	b, err := f.fetch(ctx, path, 64<<20)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decisions: the service's answer: %w", err)
	}
	return nil
}

// fetch asks the read API (the pdp's, or callerauth-proxy's on
// --decision-log-listen) for path and returns at most limit bytes of a
// 200 answer; any other is an error naming its reason.
func (f *decisionsFlags) fetch(ctx context.Context, path string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("decisions: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("decisions: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var refusal struct{ Reason, Error string }
		if json.Unmarshal(b, &refusal) == nil && refusal.Reason != "" {
			return nil, fmt.Errorf("decisions: the service refused (%d %s): %s", resp.StatusCode, refusal.Reason, refusal.Error)
		}
		return nil, fmt.Errorf("decisions: the service answered %d: %.200s", resp.StatusCode, b)
	}
	return b, nil
}

// row is what a table shows of an entry.
type row struct {
	Caller, System, Reason, Path, At string
	Allowed                          bool
	Status                           int
}

func printDecisions(w io.Writer, output string, ds []decisionlog.Stored, header bool) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		for _, d := range ds {
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		_, _ = fmt.Fprintln(tw, "INDEX\tAT\tCALLER\tSYSTEM\tDECISION\tREASON\tPATH\tSTATUS")
	}
	for _, d := range ds {
		var r row
		_ = json.Unmarshal(d.Entry, &r)
		decision := "refused"
		if r.Allowed {
			decision = "allowed"
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", d.Index, r.At, orDash(r.Caller), orDash(r.System), decision, orDash(r.Reason), r.Path, r.Status)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// query is the search the flags name.
type query struct {
	caller, system, tenant, reason, decision, since, until string
}

func (q *query) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&q.caller, "caller", "", "the caller's username (system:serviceaccount:NS:NAME)")
	fs.StringVar(&q.system, "system", "", "the system the request spoke for")
	fs.StringVar(&q.tenant, "tenant", "", "the caller's tenant")
	fs.StringVar(&q.reason, "reason", "", "the decision's or the refusal's reason")
	fs.StringVar(&q.decision, "decision", "", "allowed or refused")
	fs.StringVar(&q.since, "since", "", "from this time on (RFC 3339)")
	fs.StringVar(&q.until, "until", "", "before this time (RFC 3339)")
}

func (q query) path(after int64, limit int) string {
	v := url.Values{}
	for k, s := range map[string]string{"caller": q.caller, "system": q.system, "tenant": q.tenant, "reason": q.reason, "decision": q.decision, "since": q.since, "until": q.until} {
		if s != "" {
			v.Set(k, s)
		}
	}
	v.Set("after", strconv.FormatInt(after, 10))
	v.Set("limit", strconv.Itoa(limit))
	return decisionlog.PathSearch + "?" + v.Encode()
}

func newDecisionsSearchCmd(o *Options, f *decisionsFlags) *cobra.Command {
	var q query
	var limit int
	cmd := &cobra.Command{
		Use:     "search [--caller U] [--system S] [--tenant T] [--reason R] [--decision allowed|refused] [--since T] [--until T]",
		Short:   "The decisions that match, in log order",
		Example: "  callerauth decisions search --config audit.yaml --system secrets-engine --decision allowed --since 2026-12-01T00:00:00Z",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.connect(o); err != nil {
				return err
			}
			if limit < 1 {
				return fmt.Errorf("--limit %d: want at least 1", limit)
			}
			after, header := int64(0), true
			for left := limit; left > 0; {
				var page decisionlog.Page
				if err := f.get(cmd.Context(), q.path(after, min(left, decisionlog.MaxSearch)), &page); err != nil {
					return err
				}
				if err := printDecisions(o.Stdout, f.output, page.Decisions, header); err != nil {
					return err
				}
				header, left = false, left-len(page.Decisions)
				if page.Next == nil || len(page.Decisions) == 0 {
					break
				}
				after = *page.Next
			}
			return nil
		},
	}
	q.addFlags(cmd)
	cmd.Flags().IntVar(&limit, "limit", 100, "the most decisions printed")
	return cmd
}

func newDecisionsTailCmd(o *Options, f *decisionsFlags) *cobra.Command {
	var q query
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "tail [--caller U] [--system S] … [--interval 2s]",
		Short: "Print the decisions that match as the log grows, until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.connect(o); err != nil {
				return err
			}
			if interval <= 0 {
				return fmt.Errorf("--interval %s: want a positive duration", interval)
			}
			ctx := cmd.Context()
			after, header := int64(0), true
			for {
				var page decisionlog.Page
				if err := f.get(ctx, q.path(after, decisionlog.MaxSearch), &page); err != nil {
					return err
				}
				if err := printDecisions(o.Stdout, f.output, page.Decisions, header); err != nil {
					return err
				}
				header = false
				if n := len(page.Decisions); n > 0 {
					after = page.Decisions[n-1].Cursor
				}
				if page.Next != nil {
					continue // more already waiting
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	q.addFlags(cmd)
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often the log is asked for what is new")
	return cmd
}

// verifier reads --verifier-key.
func verifier(vkey string) (note.Verifier, error) {
	if vkey == "" {
		return nil, errors.New("--verifier-key is required: the log's verifier key (checkpoint-key printed it), what its checkpoints are checked with")
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("--verifier-key: %w", err)
	}
	return v, nil
}

// openCheckpoint checks a checkpoint's signature and reads it.
func openCheckpoint(v note.Verifier, signed string) (int64, tlog.Hash, error) {
	n, err := note.Open([]byte(signed), note.VerifierList(v))
	if err != nil {
		return 0, tlog.Hash{}, fmt.Errorf("the checkpoint is not signed by the log's key: %w", err)
	}
	origin, size, root, err := translog.ParseCheckpoint(n.Text)
	if err != nil {
		return 0, tlog.Hash{}, err
	}
	if origin != v.Name() {
		return 0, tlog.Hash{}, fmt.Errorf("the checkpoint is of %s, the key of %s", origin, v.Name())
	}
	return size, root, nil
}

func parseHashes(in []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(in))
	for i, h := range in {
		var err error
		if out[i], err = tlog.ParseHash(h); err != nil {
			return nil, fmt.Errorf("proof hash %d: %w", i, err)
		}
	}
	return out, nil
}

func newDecisionsShowCmd(o *Options, f *decisionsFlags) *cobra.Command {
	var vkey string
	cmd := &cobra.Command{
		Use:   "show INDEX --verifier-key KEY",
		Short: "One decision, proved in the log's latest signed checkpoint",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			index, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || index < 0 {
				return fmt.Errorf("%q: want a decision's index", args[0])
			}
			v, err := verifier(vkey)
			if err != nil {
				return err
			}
			if err := f.connect(o); err != nil {
				return err
			}
			var p decisionlog.Proved
			if err := f.get(cmd.Context(), decisionlog.PathEntry+strconv.FormatInt(index, 10), &p); err != nil {
				return err
			}
			size, root, err := openCheckpoint(v, p.Checkpoint)
			if err != nil {
				return err
			}
			proof, err := parseHashes(p.Proof)
			if err != nil {
				return err
			}
			if err := tlog.CheckRecord(proof, size, root, index, tlog.RecordHash(p.Entry)); err != nil {
				return fmt.Errorf("decision %d is NOT proved in the log's checkpoint of %d (%s): %w", index, size, root, err)
			}
			if f.output == "json" {
				return json.NewEncoder(o.Stdout).Encode(map[string]any{"index": index, "entry": p.Entry, "checkpoint": p.Checkpoint, "proof": p.Proof, "verified": true})
			}
			if err := printDecisions(o.Stdout, "table", []decisionlog.Stored{p.Stored}, true); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.Stdout, "%s\nverified: decision %d is in the log %s of %d decisions (root %s), checkpoint signed by its key\n", p.Entry, index, v.Name(), size, root)
			return err
		},
	}
	cmd.Flags().StringVar(&vkey, "verifier-key", "", "the log's verifier key (name+hash+key), as checkpoint-key printed it")
	return cmd
}

// witnessPolicy reads --witnesses (a policy file: docs/decision-log.md);
// with --quorum above 0, that many cosignatures are asked for instead.
func witnessPolicy(file string, quorum int) (*translog.WitnessPolicy, error) {
	if file == "" {
		if quorum != 0 {
			return nil, errors.New("--quorum belongs to --witnesses")
		}
		return nil, nil
	}
	b, err := fsutil.ReadFlagFile("--witnesses", file, 64<<10)
	if err != nil {
		return nil, err
	}
	p, err := translog.ParseWitnessPolicy(b)
	if err != nil {
		return nil, fmt.Errorf("--witnesses %s: %w", file, err)
	}
	if quorum < 0 || quorum > len(p.Witnesses) {
		return nil, fmt.Errorf("--quorum %d: want 1 to the %d witnesses of %s", quorum, len(p.Witnesses), file)
	}
	if quorum > 0 {
		p.Quorum = quorum
	}
	return &p, nil
}

// checked fetches the checkpoint a command checks, checked: with a
// policy, the newest checkpoint a quorum of its witnesses cosigned (the
// log's signature and the cosignatures); without, the latest (the log's
// signature).
func (f *decisionsFlags) checked(ctx context.Context, v note.Verifier, p *translog.WitnessPolicy) (string, int64, tlog.Hash, []string, error) {
	if p == nil {
		var latest string
		if err := f.checkpoint(ctx, &latest); err != nil {
			return "", 0, tlog.Hash{}, nil, err
		}
		size, root, err := openCheckpoint(v, latest)
		return latest, size, root, nil, err
	}
	b, err := f.fetch(ctx, decisionlog.PathTiles+"witnessed-checkpoint", 64<<10)
	if err != nil {
		return "", 0, tlog.Hash{}, nil, fmt.Errorf("the witnessed checkpoint: %w", err)
	}
	_, names, err := p.Cosigners(b, v)
	if err != nil {
		return "", 0, tlog.Hash{}, nil, err
	}
	size, root, err := openCheckpoint(v, string(b))
	return string(b), size, root, names, err
}

func newDecisionsVerifyCmd(o *Options, f *decisionsFlags) *cobra.Command {
	var vkey, since, save, witnesses string
	var quorum int
	cmd := &cobra.Command{
		Use:   "verify --verifier-key KEY [--witnesses FILE [--quorum K]] [--since FILE] [--save FILE]",
		Short: "Check the log's latest signed checkpoint (or its witnessed one, cosigned by K of N witnesses) and, from a checkpoint kept before, that the log only grew",
		Long: `verify fetches the log's latest checkpoint and checks its signature. With
--witnesses, a witness policy file (the one the pdp's
--decision-log-witnesses reads; the URLs may be left out), it checks the
log's witnessed checkpoint instead: signed by the log and cosigned by at
least the policy's quorum of its witnesses (or --quorum of them). With
--since, a checkpoint kept before (by --save, or as the pdp served it), it
also fetches the consistency proof and checks that the tree of that
checkpoint is a prefix of the one checked: nothing decided before was
changed or removed. --save writes the checkpoint checked, for the next run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := verifier(vkey)
			if err != nil {
				return err
			}
			policy, err := witnessPolicy(witnesses, quorum)
			if err != nil {
				return err
			}
			var oldSize int64
			var oldRoot tlog.Hash
			if since != "" {
				b, err := os.ReadFile(since)
				if err != nil {
					return fmt.Errorf("--since: %w", err)
				}
				if oldSize, oldRoot, err = openCheckpoint(v, string(b)); err != nil {
					return fmt.Errorf("--since %s: %w", since, err)
				}
			}
			if err := f.connect(o); err != nil {
				return err
			}
			latest, size, root, cosigners, err := f.checked(cmd.Context(), v, policy)
			if err != nil {
				return err
			}
			if oldSize > 0 {
				if oldSize > size {
					return fmt.Errorf("the log's checkpoint of %d is smaller than the one of %d kept in %s", size, oldSize, since)
				}
				var c decisionlog.Consistency
				if err := f.get(cmd.Context(), decisionlog.PathConsistency+"?old="+strconv.FormatInt(oldSize, 10)+"&size="+strconv.FormatInt(size, 10), &c); err != nil {
					return err
				}
				proof, err := parseHashes(c.Proof)
				if err != nil {
					return err
				}
				if err := tlog.CheckTree(proof, size, root, oldSize, oldRoot); err != nil {
					return fmt.Errorf("the log of %d is NOT an extension of the one of %d kept in %s: %w", size, oldSize, since, err)
				}
			}
			if save != "" {
				if err := os.WriteFile(save, []byte(latest), 0o644); err != nil { //nolint:gosec // a checkpoint is public
					return fmt.Errorf("--save: %w", err)
				}
			}
			if f.output == "json" {
				return json.NewEncoder(o.Stdout).Encode(map[string]any{"size": size, "root": root.String(), "since": oldSize, "consistent": true, "cosigners": cosigners})
			}
			msg := fmt.Sprintf("verified: the log %s holds %d decisions (root %s), checkpoint signed by its key", v.Name(), size, root)
			if policy != nil {
				msg += fmt.Sprintf(" and cosigned by %d of %d witnesses (%s; %d required)", len(cosigners), len(policy.Witnesses), strings.Join(cosigners, ", "), policy.Quorum)
			}
			if oldSize > 0 {
				msg += fmt.Sprintf("; it extends the log of %d kept in %s", oldSize, since)
			}
			_, err = fmt.Fprintln(o.Stdout, msg)
			return err
		},
	}
	cmd.Flags().StringVar(&vkey, "verifier-key", "", "the log's verifier key (name+hash+key), as checkpoint-key printed it")
	cmd.Flags().StringVar(&since, "since", "", "a checkpoint kept before: check the log only grew since")
	cmd.Flags().StringVar(&save, "save", "", "write the checkpoint checked here")
	cmd.Flags().StringVar(&witnesses, "witnesses", "", "a witness policy file (witness <verifier key> [<url>] lines, quorum <k>): check the witnessed checkpoint, cosigned by a quorum")
	cmd.Flags().IntVar(&quorum, "quorum", 0, "the cosignatures required, 1 to the policy's witnesses (default: the policy's quorum)")
	return cmd
}

func newDecisionsProofCmd(o *Options, f *decisionsFlags) *cobra.Command {
	var vkey, witnesses, out string
	var quorum int
	cmd := &cobra.Command{
		Use:   "proof INDEX --verifier-key KEY [--witnesses FILE [--quorum K]] --out FILE",
		Short: "Write a self-contained proof of one decision (C2SP tlog-proof: the entry, its inclusion proof, the cosigned checkpoint) that verifies offline",
		Long: `proof fetches decision INDEX with its inclusion proof in the log's
witnessed checkpoint (with --witnesses; else its latest), checks both as
verify and show do, and writes them as one C2SP tlog-proof
(c2sp.org/tlog-proof@v1): the entry is the extra data, then its index, the
proof's hashes and the checkpoint with its signatures. Anyone holding the
log's verifier key (and the witnesses' keys) can check it offline, with no
call to the pdp. A decision not yet in a witnessed checkpoint is refused:
ask again after the next one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			index, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || index < 0 {
				return fmt.Errorf("%q: want a decision's index", args[0])
			}
			if out == "" {
				return errors.New("--out is required: the file the proof is written to")
			}
			v, err := verifier(vkey)
			if err != nil {
				return err
			}
			policy, err := witnessPolicy(witnesses, quorum)
			if err != nil {
				return err
			}
			if err := f.connect(o); err != nil {
				return err
			}
			checkpoint, size, root, _, err := f.checked(cmd.Context(), v, policy)
			if err != nil {
				return err
			}
			if index >= size {
				return fmt.Errorf("decision %d is not yet in the log's checkpoint of %d: ask again after the next", index, size)
			}
			var p decisionlog.Proved
			if err := f.get(cmd.Context(), decisionlog.PathEntry+strconv.FormatInt(index, 10)+"?size="+strconv.FormatInt(size, 10), &p); err != nil {
				return err
			}
			proof, err := parseHashes(p.Proof)
			if err != nil {
				return err
			}
			if err := tlog.CheckRecord(proof, size, root, index, tlog.RecordHash(p.Entry)); err != nil {
				return fmt.Errorf("decision %d is NOT proved in the log's checkpoint of %d (%s): %w", index, size, root, err)
			}
			var b strings.Builder
			b.WriteString("c2sp.org/tlog-proof@v1\n")
			b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Entry) + "\n")
			fmt.Fprintf(&b, "index %d\n", index)
			for _, h := range proof {
				b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
			}
			b.WriteString("\n" + checkpoint)
			if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil { //nolint:gosec // a proof is meant to be handed on
				return fmt.Errorf("--out: %w", err)
			}
			_, err = fmt.Fprintf(o.Stdout, "wrote %s: decision %d in the log %s of %d decisions (root %s)\n", out, index, v.Name(), size, root)
			return err
		},
	}
	cmd.Flags().StringVar(&vkey, "verifier-key", "", "the log's verifier key (name+hash+key), as checkpoint-key printed it")
	cmd.Flags().StringVar(&witnesses, "witnesses", "", "a witness policy file: prove the decision in the witnessed checkpoint, cosigned by a quorum")
	cmd.Flags().IntVar(&quorum, "quorum", 0, "the cosignatures required, 1 to the policy's witnesses (default: the policy's quorum)")
	cmd.Flags().StringVar(&out, "out", "", "the file the proof is written to (.tlog-proof)")
	return cmd
}

// checkpoint fetches the log's latest checkpoint (tlog-tiles).
func (f *decisionsFlags) checkpoint(ctx context.Context, out *string) error {
	b, err := f.fetch(ctx, decisionlog.PathTiles+"checkpoint", 64<<10)
	if err != nil {
		return err
	}
	*out = string(b)
	return nil
}

// newDecisionsCheckpointKeyCmd is "checkpoint-key" (use) or, hidden and
// deprecated, its old name "keygen", a letter from the record-signing
// key's "callerauth decision keygen".
func newDecisionsCheckpointKeyCmd(o *Options, use string) *cobra.Command {
	var origin, out string
	cmd := &cobra.Command{
		Use:   use + " --origin ORIGIN --out FILE",
		Short: "Generate the key that signs a decision log's checkpoints (Ed25519, a signed-note key named ORIGIN; mode 0600) and print its verifier key",
		Long: "Generate the key that signs a decision log's checkpoints (C2SP tlog-checkpoint, signed notes with Ed25519), named ORIGIN, " +
			"the log's identity (a schema-less URL such as pdp.example.com/decisions). Replicas share one key, each keeping a log " +
			"of its own under ORIGIN/REPLICA (--decision-log-replica; replica-key prints each one's verifier key). " +
			"The verifier key printed is what an auditor checks checkpoints with (golang.org/x/mod/sumdb/note).",
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if origin == "" || strings.ContainsAny(origin, " +\n") {
				return fmt.Errorf("--origin %q: want a schema-less URL with no space or plus sign, such as pdp.example.com/decisions", origin)
			}
			skey, vkey, err := note.GenerateKey(rand.Reader, origin)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("--out %s exists: a key is never overwritten", out)
			}
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintln(f, skey); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(o.Stdout, "wrote %s\nverifier key: %s\n", out, vkey)
			return nil
		},
	}
	cmd.Flags().StringVar(&origin, "origin", "", "the log's origin, the key's name: a schema-less URL such as pdp.example.com/decisions")
	cmd.Flags().StringVar(&out, "out", "", "file to write (must not exist)")
	_ = cmd.MarkFlagRequired("origin")
	_ = cmd.MarkFlagRequired("out")
	if use != "checkpoint-key" {
		cmd.Hidden = true
		cmd.Deprecated = "use callerauth decisions checkpoint-key (callerauth decision keygen makes a key that signs decision records)"
	}
	return cmd
}

func newDecisionsReplicaKeyCmd(o *Options) *cobra.Command {
	var vkey, replica string
	cmd := &cobra.Command{
		Use:   "replica-key --verifier-key KEY --replica NAME",
		Short: "Print the verifier key of one replica's log (origin ORIGIN/NAME, --decision-log-replica) from the verifier key checkpoint-key printed",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			k, err := decisionlog.ReplicaVerifierKey(vkey, replica)
			if err != nil {
				return fmt.Errorf("--verifier-key: %w", err)
			}
			fmt.Fprintln(o.Stdout, k)
			return nil
		},
	}
	cmd.Flags().StringVar(&vkey, "verifier-key", "", "the verifier key checkpoint-key printed")
	cmd.Flags().StringVar(&replica, "replica", "", "the replica's name, as --decision-log-replica gives it (a pod's name)")
	_ = cmd.MarkFlagRequired("verifier-key")
	_ = cmd.MarkFlagRequired("replica")
	return cmd
}
