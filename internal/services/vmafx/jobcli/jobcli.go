// Package jobcli is the vmafx JobService's command line (callerauth vmafx):
// submit, get, list, watch and cancel jobs, and write clips to try them on.
// The callerauth command and the demo run it.
package jobcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
	"github.com/callerauth/callerauth/internal/services/vmafx/connection"
)

// Exit codes of the vmafx commands, beyond 0 (done) and 1 (a usage or
// local error): the controller refused the call, or gave no answer, or
// the job watched ended without succeeding.
const (
	ExitRefused     = 3
	ExitUnreachable = 4
	ExitJobFailed   = 5
)

// exitError is an error with the exit code it ends the process with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the process exit code of err: 0 for nil, the code an
// exitError carries, else 1.
func ExitCode(err error) int {
	var e *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.code
	}
	return 1
}

// ExitInterrupted is the exit code of a command stopped by Ctrl-C or
// SIGTERM (128 + SIGINT, as a shell reports it).
const ExitInterrupted = 130

// callError says why a call to the controller failed: the code, the
// stable reason and the role a method needs (the ErrorInfo of the status),
// and the message; refused and unanswered calls get their own exit codes.
// What failed here rather than at the controller is a local error (exit
// 1) saying what to fix: a token that could not be read or has expired
// (nothing was sent), a controller certificate the configured CA or server
// name does not accept; an interrupted command exits 130.
func (f *vmafxFlags) callError(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return &exitError{code: ExitInterrupted, err: fmt.Errorf("%s: interrupted", what)}
	}
	st := status.Convert(err)
	switch msg := st.Message(); {
	case st.Code() == codes.Unauthenticated && strings.HasPrefix(msg, unsentPrefix):
		return fmt.Errorf("%s: nothing was sent, the token could not be: %s", what, strings.TrimPrefix(msg, unsentPrefix))
	case st.Code() == codes.Unavailable && strings.Contains(msg, "authentication handshake failed"):
		return fmt.Errorf("%s: the controller's certificate was not accepted — check the CA (%s) and the server name (%s): %s", what, orNone(f.cfg.CAFile, "the system's roots"), orNone(f.cfg.ServerName, "the address's host"), msg)
	}
	reason, role := "", ""
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reason, role = ei.GetReason(), ei.GetMetadata()["required_role"]
		}
	}
	var b strings.Builder
	code := ExitRefused
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		code = ExitUnreachable
		fmt.Fprintf(&b, "%s: no answer from the controller (%s", what, st.Code())
	default:
		fmt.Fprintf(&b, "%s refused (%s", what, st.Code())
	}
	if reason != "" {
		fmt.Fprintf(&b, " %s", reason)
	}
	if role != "" {
		fmt.Fprintf(&b, ", needs role %s", role)
	}
	fmt.Fprintf(&b, "): %s", st.Message())
	if reason == "token_invalid" {
		b.WriteString(" (check that the token file holds a current token for the controller's audience, from the tenant's identity provider)")
	}
	return &exitError{code: code, err: errors.New(b.String())}
}

// unsentPrefix begins the status gRPC gives a call whose token source
// failed before anything was sent.
const unsentPrefix = "transport: per-RPC creds failed due to error: "

func orNone(v, none string) string {
	if v == "" {
		return none
	}
	return v
}

// vmafxFlags are the flags every vmafx command shares.
type vmafxFlags struct {
	config  string
	output  string
	timeout time.Duration
	cfg     credentials.Config // the connection loaded by client
}

// client dials the controller the way the node and the operator do: the
// "controller" section of --config, VMAFX_CONTROLLER_* over it.
func (f *vmafxFlags) client(o *Options) (vmafxv1.JobServiceClient, func(), error) {
	if !slices.Contains([]string{"table", "json", "yaml", "name"}, f.output) {
		return nil, nil, fmt.Errorf("--output %q: want table, json, yaml or name", f.output)
	}
	lookup := func(k string) (string, bool) {
		v := o.Getenv(k)
		return v, v != ""
	}
	if f.timeout <= 0 {
		return nil, nil, fmt.Errorf("--timeout %s: want a positive duration (how long one call may take)", f.timeout)
	}
	cfg, err := connection.Load(f.config, lookup)
	if err != nil {
		return nil, nil, fmt.Errorf("vmafx: the controller connection: %w", err)
	}
	f.cfg = cfg
	if cfg.HasToken() {
		// The token is read before the controller is dialled: a token
		// file missing, unreadable or expired is a local error (exit 1)
		// whether or not the controller answers — gRPC reads per-call
		// credentials only once a connection is up, so with the
		// controller down it was "no answer" (exit 4).
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		_, err := cfg.TokenSource().Token(ctx)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("vmafx: nothing was sent, the token could not be: %w", err)
		}
	}
	conn, jobs, err := connection.Dial(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("vmafx: %w", err)
	}
	return jobs, func() { _ = conn.Close() }, nil
}

func (f *vmafxFlags) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.timeout)
}

// jobResponse is a response that carries one job.
type jobResponse interface {
	proto.Message
	GetJob() *vmafxv1.Job
}

// one makes one call that answers one job, within --timeout, and prints
// the job; what names the call in a refusal.
func (f *vmafxFlags) one(cmd *cobra.Command, o *Options, what string, call func(context.Context, vmafxv1.JobServiceClient) (jobResponse, error)) error {
	jobs, done, err := f.client(o)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := f.call(cmd.Context())
	defer cancel()
	resp, err := call(ctx, jobs)
	if err != nil {
		return f.callError(cmd.Context(), what, err)
	}
	return printJobs(o.Stdout, f.output, resp, resp.GetJob())
}

// Options are the command's surroundings.
type Options struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment (VMAFX_CONTROLLER_*).
	Getenv func(string) string
}

// NewCommand is the vmafx command tree.
func NewCommand(o *Options) *cobra.Command {
	f := &vmafxFlags{}
	cmd := &cobra.Command{
		Use:   "vmafx",
		Short: "Submit, list, watch and cancel vmafx quality-measurement jobs; write clips to try them on",
		Long: `The vmafx commands call the controller's JobService with the one credentials
package, under the same names as the node and the operator: the "controller"
section of --config (address, tls, ca_file, server_name, token_file, token)
and the VMAFX_CONTROLLER_* variables over it, so one file serves all three.
The token file is read on every call; an expired JWT is never sent.

Exit codes: 0 done; 1 a usage or local error (a token file missing or
expired: nothing was sent; a CA or server name that does not accept the
controller's certificate); 3 the controller refused the call (the message
names the reason and any role the method needs); 4 no answer (unreachable,
unavailable, timed out: retry); 5 the job watched ended FAILED or
CANCELLED; 130 interrupted.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.config, "config", "", "YAML file with a controller section (address, tls, ca_file, server_name, token_file, token), as the node's and the operator's")
	pf.StringVarP(&f.output, "output", "o", "table", "how jobs are printed: table, json, yaml, or name (the job IDs, one a line, for scripts)")
	pf.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long one call may take")
	cmd.AddCommand(newVmafxSubmitCmd(o, f), newVmafxGetCmd(o, f), newVmafxListCmd(o, f), newVmafxWatchCmd(o, f), newVmafxCancelCmd(o, f), newVmafxClipCmd(o))
	return cmd
}

func newVmafxSubmitCmd(o *Options, f *vmafxFlags) *cobra.Command {
	var spec vmafxv1.JobSpec
	var file, requestID string
	cmd := &cobra.Command{
		Use:   "submit --reference PATH --distorted PATH [--metric psnr]... | -f SPEC",
		Short: "Queue a job in your tenant: two clips, paths relative to the tenant's clip directory on the nodes",
		Example: `  callerauth vmafx submit --config operator.yaml --reference ref.y4m --distorted takes/dist.y4m --metric psnr --metric ssim
  callerauth vmafx submit --config operator.yaml -f job.yaml --request-id nightly-2026-12-01`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file != "" {
				if cmd.Flags().Changed("reference") || cmd.Flags().Changed("distorted") || cmd.Flags().Changed("metric") {
					return errors.New("vmafx submit: -f and --reference/--distorted/--metric: give the spec one way")
				}
				if err := readSpec(file, &spec); err != nil {
					return err
				}
			}
			if spec.GetReference() == "" || spec.GetDistorted() == "" {
				return errors.New("vmafx submit: --reference and --distorted are required (or -f with reference and distorted)")
			}
			return f.one(cmd, o, "submit", func(ctx context.Context, jobs vmafxv1.JobServiceClient) (jobResponse, error) {
				return jobs.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &spec, RequestId: requestID})
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&spec.Reference, "reference", "", "the reference clip, relative to the tenant's clip directory")
	fl.StringVar(&spec.Distorted, "distorted", "", "the distorted clip, relative to the tenant's clip directory")
	fl.StringArrayVar(&spec.Metrics, "metric", []string{"psnr", "ssim"}, "a metric to measure: psnr or ssim (repeatable)")
	fl.StringVarP(&file, "file", "f", "", "the spec as YAML or JSON: reference, distorted, metrics")
	fl.StringVar(&requestID, "request-id", "", "an idempotency key: a resubmit with the same key (after a lost answer) returns the job the first one queued, never a second")
	return cmd
}

// maxSpecFile bounds a spec file.
const maxSpecFile = 64 << 10

// readSpec reads a job spec (YAML or JSON, the JobSpec's fields) strictly:
// no key twice, no unknown key.
func readSpec(path string, spec *vmafxv1.JobSpec) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("vmafx submit: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpecFile+1))
	if err != nil {
		return fmt.Errorf("vmafx submit: %w", err)
	}
	if len(b) > maxSpecFile {
		return fmt.Errorf("vmafx submit: %s: over %d bytes; a spec is at most that", path, maxSpecFile)
	}
	j, err := ijson.FromYAML(b)
	if err == nil {
		err = protojson.Unmarshal(j, spec)
	}
	if err != nil {
		return fmt.Errorf("vmafx submit: %s: %w", path, err)
	}
	return nil
}

func newVmafxGetCmd(o *Options, f *vmafxFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get JOB_ID",
		Short: "Show a job of your tenant",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.one(cmd, o, "get", func(ctx context.Context, jobs vmafxv1.JobServiceClient) (jobResponse, error) {
				return jobs.GetJob(ctx, &vmafxv1.GetJobRequest{Id: args[0]})
			})
		},
	}
}

// maxListPages bounds list --all.
const maxListPages = 1000

func newVmafxListCmd(o *Options, f *vmafxFlags) *cobra.Command {
	var state, pageToken string
	var pageSize int32
	var all bool
	cmd := &cobra.Command{
		Use:   "list [--state STATE] [--page-size N] [--page-token T | --all]",
		Short: "List your tenant's jobs, newest first, a page at a time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &vmafxv1.ListJobsRequest{PageSize: pageSize, PageToken: pageToken}
			if state != "" {
				s, ok := vmafxv1.JobState_value["JOB_STATE_"+strings.ToUpper(state)]
				if !ok || s == 0 {
					return fmt.Errorf("vmafx list: --state %q: want pending, running, succeeded, failed or cancelled", state)
				}
				req.State = vmafxv1.JobState(s)
			}
			if all && pageToken != "" {
				return errors.New("vmafx list: --all and --page-token: --all starts at the first page")
			}
			jobs, done, err := f.client(o)
			if err != nil {
				return err
			}
			defer done()
			out := &vmafxv1.ListJobsResponse{}
			for page := 0; ; page++ {
				if page == maxListPages {
					return fmt.Errorf("vmafx list: more than %d pages; narrow it with --state", maxListPages)
				}
				ctx, cancel := f.call(cmd.Context())
				resp, err := jobs.ListJobs(ctx, req)
				cancel()
				if err != nil {
					return f.callError(cmd.Context(), "list", err)
				}
				out.Jobs = append(out.Jobs, resp.GetJobs()...)
				out.NextPageToken = resp.GetNextPageToken()
				if !all || out.NextPageToken == "" {
					break
				}
				req.PageToken = out.NextPageToken
			}
			if err := printJobs(o.Stdout, f.output, out, out.GetJobs()...); err != nil {
				return err
			}
			if f.output == "table" && out.GetNextPageToken() != "" {
				fmt.Fprintf(o.Stdout, "more: --page-token %s\n", out.GetNextPageToken())
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "only jobs in this state: pending, running, succeeded, failed or cancelled")
	fl.Int32Var(&pageSize, "page-size", 0, "jobs per page (0: the controller's default)")
	fl.StringVar(&pageToken, "page-token", "", "the page a previous list ended with")
	fl.BoolVar(&all, "all", false, "every page")
	return cmd
}

func newVmafxCancelCmd(o *Options, f *vmafxFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel JOB_ID",
		Short: "Cancel a job that has not finished (a running one is given back by its node)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.one(cmd, o, "cancel", func(ctx context.Context, jobs vmafxv1.JobServiceClient) (jobResponse, error) {
				return jobs.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: args[0]})
			})
		},
	}
}

func newVmafxWatchCmd(o *Options, f *vmafxFlags) *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch JOB_ID",
		Short: "Follow a job to its end: a progress bar on a terminal, a line per change otherwise",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < 100*time.Millisecond {
				return fmt.Errorf("vmafx watch: --interval %s: want at least 100ms", interval)
			}
			jobs, done, err := f.client(o)
			if err != nil {
				return err
			}
			defer done()
			// How many frames a clip has is known only when it is measured:
			// on a terminal the bar counts frames (a spinner, no total).
			var bar *progressbar.ProgressBar
			if file, ok := o.Stderr.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
				bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(o.Stderr), progressbar.OptionSetDescription(args[0]),
					progressbar.OptionClearOnFinish(), progressbar.OptionSetItsString("frames"), progressbar.OptionShowIts(), progressbar.OptionShowCount())
			}
			last := ""
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				ctx, cancel := f.call(cmd.Context())
				resp, err := jobs.GetJob(ctx, &vmafxv1.GetJobRequest{Id: args[0]})
				cancel()
				if err != nil {
					return f.callError(cmd.Context(), "watch", err)
				}
				j := resp.GetJob()
				line := strings.Join(strings.Fields(fmt.Sprintf("%s %s %d frames", stateName(j.GetState()), shown(j.GetNode()), frames(j))), " ")
				switch {
				case bar != nil:
					bar.Describe(args[0] + " " + stateName(j.GetState()))
					_ = bar.Set64(frames(j))
				case line != last:
					fmt.Fprintln(o.Stderr, line)
				}
				last = line
				if terminal(j.GetState()) {
					if bar != nil {
						_ = bar.Finish()
					}
					if err := printJobs(o.Stdout, f.output, resp, j); err != nil {
						return err
					}
					if j.GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED {
						return &exitError{code: ExitJobFailed, err: fmt.Errorf("job %s ended %s %s: %s", j.GetId(), stateName(j.GetState()), j.GetReason(), j.GetError())}
					}
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return &exitError{code: ExitInterrupted, err: errors.New("watch: interrupted")}
				case <-t.C:
				}
			}
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often the job is asked for")
	return cmd
}

// frames is how far a job got: the frames measured so far while it runs,
// the frames measured once it has scores.
func frames(j *vmafxv1.Job) int64 {
	if sc := j.GetScores(); len(sc) > 0 {
		return sc[0].GetFrames()
	}
	return int64(j.GetProgress())
}

func terminal(s vmafxv1.JobState) bool {
	return s == vmafxv1.JobState_JOB_STATE_SUCCEEDED || s == vmafxv1.JobState_JOB_STATE_FAILED || s == vmafxv1.JobState_JOB_STATE_CANCELLED
}

// stateName is PENDING for JOB_STATE_PENDING.
func stateName(s vmafxv1.JobState) string { return strings.TrimPrefix(s.String(), "JOB_STATE_") }

// printJobs prints the response as JSON or YAML (the message as protojson
// has it), the jobs' IDs, or the jobs as a table.
func printJobs(w io.Writer, format string, resp proto.Message, jobs ...*vmafxv1.Job) error {
	switch format {
	case "name":
		for _, j := range jobs {
			if _, err := fmt.Fprintln(w, j.GetId()); err != nil {
				return err
			}
		}
		return nil
	case "json", "yaml":
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
		if err != nil {
			return err
		}
		if format == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
		} else {
			b = append(b, '\n')
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tFRAMES\tNODE\tSCORES\tREASON\tCREATED")
	for _, j := range jobs {
		var scores []string
		for _, s := range j.GetScores() {
			scores = append(scores, fmt.Sprintf("%s=%.2f", s.GetMetric(), s.GetMean()))
		}
		node := j.GetNode()
		if node == "" {
			node = "-"
		}
		created := "-"
		if c := j.GetCreatedAt(); c != nil {
			created = c.AsTime().UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", shown(j.GetId()), stateName(j.GetState()), frames(j), shown(node),
			orDash(strings.Join(scores, " ")), shown(orDash(j.GetReason())), created)
	}
	return tw.Flush()
}

// shown is s as a terminal may print it: as it is when every character
// is printable, else quoted with Go's escapes (a control character, an
// escape sequence or a bidirectional override reaches no terminal raw,
// whatever a controller of an older version stored).
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.QuoteToASCII(s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Clip bounds: what a try-out needs, and a disk's worth at most.
const (
	maxClipSide   = 4096
	maxClipFrames = 10000
	maxClipBytes  = 4 << 30
)

func newVmafxClipCmd(o *Options) *cobra.Command {
	var dir string
	var spec clipgen.Spec
	var seed int64
	cmd := &cobra.Command{
		Use:   "clip --out-dir DIR",
		Short: "Write a reference and a distorted Y4M clip (8-bit 4:2:0) to try a job on: the generator the tests use",
		Long: `clip writes DIR/reference.y4m (a moving pattern) and DIR/distorted.y4m (the
same pattern with seeded noise of --noise levels): a pair whose PSNR falls as
--noise rises. Put DIR under a tenant's clip directory on the node and submit
the two paths relative to it.`,
		Example: `  callerauth vmafx clip --out-dir /var/lib/vmafx/clips/tenant-a/try --width 320 --height 240 --frames 25 --noise 6`,
		Args:    cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			switch {
			case dir == "":
				return errors.New("vmafx clip: --out-dir is required")
			case spec.Width < 2 || spec.Height < 2 || spec.Width > maxClipSide || spec.Height > maxClipSide:
				return fmt.Errorf("vmafx clip: %dx%d: want 2 to %d pixels a side", spec.Width, spec.Height, maxClipSide)
			case spec.Frames < 1 || spec.Frames > maxClipFrames:
				return fmt.Errorf("vmafx clip: --frames %d: want 1 to %d", spec.Frames, maxClipFrames)
			case spec.Noise < 0 || spec.Noise > 255:
				return fmt.Errorf("vmafx clip: --noise %d: want 0 to 255 levels", spec.Noise)
			case int64(spec.Width)*int64(spec.Height)*3/2*int64(spec.Frames) > maxClipBytes:
				return fmt.Errorf("vmafx clip: %dx%d x %d frames is over %d GiB a clip", spec.Width, spec.Height, spec.Frames, maxClipBytes>>30)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a clip directory the node, another user, reads.
				return fmt.Errorf("vmafx clip: %w", err)
			}
			spec.Seed = uint64(seed) //nolint:gosec // a noise seed.
			ref, dist := spec, spec
			ref.Noise = 0
			for _, c := range []struct {
				name string
				spec clipgen.Spec
			}{{"reference.y4m", ref}, {"distorted.y4m", dist}} {
				if err := clipgen.WriteFile(filepath.Join(dir, c.name), c.spec); err != nil {
					return fmt.Errorf("vmafx clip: %w", err)
				}
			}
			fmt.Fprintf(o.Stdout, "wrote %s and %s (%dx%d, %d frames, noise %d)\n", filepath.Join(dir, "reference.y4m"), filepath.Join(dir, "distorted.y4m"),
				spec.Width, spec.Height, spec.Frames, spec.Noise)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "out-dir", "", "directory to write reference.y4m and distorted.y4m to (created)")
	fl.IntVar(&spec.Width, "width", 320, "frame width")
	fl.IntVar(&spec.Height, "height", 240, "frame height")
	fl.IntVar(&spec.Frames, "frames", 25, "frames")
	fl.IntVar(&spec.Noise, "noise", 6, "amplitude of the distorted clip's noise, in luma levels")
	fl.Int64Var(&seed, "seed", 1, "seed of the noise: the same seed writes the same clip")
	return cmd
}
