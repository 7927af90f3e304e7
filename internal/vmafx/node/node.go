// Package node is the vmafx node: it claims jobs from the controller,
// measures them (luma PSNR and SSIM between two Y4M clips) and reports the
// scores. It reaches the controller through the one credentials package,
// with the keys and environment variables the operator uses: TLS, a bearer
// token re-read from its file on every call, an expired JWT never sent.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/vmafx/connection"
	"github.com/callerauth/callerauth/internal/vmafx/measure"
	"github.com/callerauth/callerauth/token"
)

// Options configure a node.
type Options struct {
	// Config is a YAML file whose "controller" section holds the
	// connection (address, tls, ca_file, server_name, token_file, token);
	// VMAFX_CONTROLLER_* environment variables override it.
	Config string
	// Getenv reads the environment. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Poll is the wait between claims when nothing is pending (or the
	// controller cannot be reached). Default 2 s.
	Poll time.Duration
	// ReportEvery is how often a running job's progress is reported, which
	// renews its lease. Default 5 s.
	ReportEvery time.Duration
	Logger      *slog.Logger
}

// Node is a configured node.
type Node struct {
	o      Options
	log    *slog.Logger
	cfg    credentials.Config
	tokens token.Source
	conn   *grpc.ClientConn
	client vmafxv1.JobServiceClient
}

// New loads and validates the controller connection — a combination that
// cannot be honoured is an error naming the key and the variable — and
// dials (lazily) the controller.
func New(o Options) (*Node, error) {
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.ReportEvery <= 0 {
		o.ReportEvery = 5 * time.Second
	}
	n := &Node{o: o, log: o.Logger}
	if n.log == nil {
		n.log = slog.Default()
	}
	cfg, err := connection.Load(o.Config, o.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.cfg, n.tokens = cfg, cfg.TokenSource()
	if n.conn, n.client, err = connection.Dial(cfg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return n, nil
}

// Close closes the connection.
func (n *Node) Close() error { return n.conn.Close() }

// Run claims, measures and reports until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	n.log.Info("node: polling the controller", "address", n.cfg.Address, "tls", n.cfg.TLS, "token_file", n.cfg.TokenFile)
	for {
		worked := n.once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !worked {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(n.o.Poll):
			}
		}
	}
}

// once claims and runs at most one job; it says whether it ran one.
func (n *Node) once(ctx context.Context) bool {
	// The token is checked here, before any call: a token file holding an
	// expired JWT (a stalled refresher) is reported as that file and that
	// expiry, and nothing is sent; the next poll reads the file again.
	if n.tokens != nil {
		if _, err := n.tokens.Token(ctx); err != nil {
			var expired *token.ExpiredError
			if errors.As(err, &expired) {
				n.log.Warn("node: the token file holds an expired token; not sending it, polling on (is its refresher running?)",
					"token_file", expired.Source, "expiry", expired.Expiry.UTC().Format(time.RFC3339))
			} else {
				n.log.Warn("node: reading the token", "err", err)
			}
			return false
		}
	}
	resp, err := n.client.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{})
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("node: claiming a job", "code", status.Code(err).String(), "err", status.Convert(err).Message())
		}
		return false
	}
	job := resp.GetJob()
	if job == nil {
		return false
	}
	n.log.Info("node: claimed", "job", job.GetId(), "tenant", job.GetTenant(), "reference", job.GetSpec().GetReference(), "distorted", job.GetSpec().GetDistorted())
	n.run(ctx, job)
	return true
}

func (n *Node) run(ctx context.Context, job *vmafxv1.Job) {
	last := time.Now()
	total := 0
	progress := func(frames int) {
		total = frames
		if time.Since(last) < n.o.ReportEvery {
			return
		}
		last = time.Now()
		// Progress renews the lease; a frame count is all a stream gives.
		if _, err := n.client.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: job.GetId(), State: vmafxv1.JobState_JOB_STATE_RUNNING, Progress: float64(frames)}); err != nil {
			n.log.Warn("node: reporting progress", "job", job.GetId(), "err", status.Convert(err).Message())
		}
	}
	spec := job.GetSpec()
	scores, err := measure.Files(ctx, spec.GetReference(), spec.GetDistorted(), spec.GetMetrics(), measure.Options{Progress: progress})
	if ctx.Err() != nil {
		return // stopping: the lease expires and another node takes the job
	}
	report := &vmafxv1.ReportJobRequest{Id: job.GetId(), State: vmafxv1.JobState_JOB_STATE_SUCCEEDED}
	if err != nil {
		report.State, report.Error = vmafxv1.JobState_JOB_STATE_FAILED, err.Error()
	}
	for _, s := range scores {
		report.Scores = append(report.Scores, &vmafxv1.Score{Metric: s.Metric, Mean: s.Mean, Min: s.Min, Frames: s.Frames})
	}
	for attempt := 0; ; attempt++ {
		_, rerr := n.client.ReportJob(ctx, report)
		if rerr == nil {
			n.log.Info("node: reported", "job", job.GetId(), "state", report.GetState().String(), "frames", total, "error", report.GetError())
			return
		}
		if status.Code(rerr) != codes.Unavailable || attempt == 5 || ctx.Err() != nil {
			n.log.Error("node: the report was not accepted", "job", job.GetId(), "code", status.Code(rerr).String(), "err", status.Convert(rerr).Message())
			return
		}
		time.Sleep(time.Second)
	}
}

// NewCommand is the vmafx-node command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	var o Options
	var logLevel string
	cmd := &cobra.Command{
		Use:   "vmafx-node",
		Short: "Claim vmafx jobs, measure PSNR and SSIM, report the scores",
		Long: `vmafx-node polls the controller's ClaimJob, measures the claimed job (luma PSNR
and SSIM between two Y4M 8-bit 4:2:0 clips) and reports. Its controller
connection is the "controller" section of --config and the VMAFX_CONTROLLER_*
environment variables (docs/vmafx.md); the token file is read on every call.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := serve.NewLogger(logLevel, stderr)
			if err != nil {
				return err
			}
			o.Logger = log
			n, err := New(o)
			if err != nil {
				return err
			}
			defer n.Close()
			return n.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Config, "config", "", "YAML file with a controller section (keys: address, tls, ca_file, server_name, token_file, token)")
	f.DurationVar(&o.Poll, "poll", 2*time.Second, "wait between claims when nothing is pending")
	f.DurationVar(&o.ReportEvery, "report-every", 5*time.Second, "how often a running job's progress is reported (renewing its lease)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
