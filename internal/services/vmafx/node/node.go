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
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/services/vmafx/connection"
	"github.com/callerauth/callerauth/internal/services/vmafx/measure"
	"github.com/callerauth/callerauth/token"
)

// Defaults of the node's flags.
const (
	DefaultClipRoot       = "/var/lib/vmafx/clips"
	DefaultMaxJobDuration = time.Hour
	DefaultMetricsListen  = "127.0.0.1:9092"
)

// Node is a configured node.
type Node struct {
	o      Config
	m      *serve.Manager
	jobs   *prometheus.CounterVec // by outcome
	log    *slog.Logger
	cfg    credentials.Config
	tokens token.Source
	conn   *grpc.ClientConn
	client vmafxv1.JobServiceClient
	// claimKey is the key of the claim under way: kept while ClaimJob
	// answers Unavailable or times out (the claim may have been made and
	// its answer lost: the retry finds it), replaced after any other
	// answer. Only the claim loop uses it.
	claimKey string
}

// New dials (lazily) the controller, as c says.
func New(c Config) (*Node, error) {
	m, err := serve.New("node", c.Serve, c.Logger)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	m.Health().Registry.MustRegister(serve.BuildInfo("vmafx_node"))
	n := &Node{o: c, m: m, log: m.Logger()}
	n.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmafx_node_jobs_total",
		Help: "Jobs this node claimed, by outcome: succeeded or failed (reported), given_back (to the queue: stopping, or past --max-job-duration), stopped (the controller refused a progress report: lease lost or job cancelled), unreported (the report was not accepted)."}, []string{"outcome"})
	for _, o := range []string{"succeeded", "failed", "given_back", "stopped", "unreported"} {
		n.jobs.WithLabelValues(o)
	}
	m.Health().Registry.MustRegister(n.jobs)
	n.cfg, n.tokens = c.Controller, c.Controller.TokenSource()
	if n.conn, n.client, err = connection.Dial(c.Controller); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return n, nil
}

// Close closes the connection.
func (n *Node) Close() error { return n.conn.Close() }

// Run claims, measures and reports until ctx ends, with the metrics
// listener beside.
func (n *Node) Run(ctx context.Context) error {
	n.m.Add(serve.Named("claim loop", serve.RunnableFunc(n.loop)))
	n.m.Set("controller", n.cfg.Address, "controller_tls", n.cfg.TLS, "token_file", n.cfg.TokenFile, "clip_root", n.o.ClipRoot, "node_name", n.o.NodeName,
		"poll", n.o.Poll.String(), "report_every", n.o.ReportEvery.String(), "max_job_duration", n.o.MaxJobDuration.String())
	return n.m.Run(ctx)
}

// loop claims, measures and reports until ctx ends.
func (n *Node) loop(ctx context.Context) error {
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
	if n.claimKey == "" {
		n.claimKey = uuid.NewString()
	}
	resp, err := n.client.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: n.o.NodeName, ClaimKey: n.claimKey})
	if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
		n.claimKey = "" // answered: the next claim is another one
	}
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
	n.log.Info("node: claimed", "job", job.GetId(), "tenant", job.GetTenant(), "node", job.GetNode(), "attempt", job.GetAttempts(),
		"reference", job.GetSpec().GetReference(), "distorted", job.GetSpec().GetDistorted())
	n.run(ctx, job, resp.GetLeaseId())
	return true
}

// tracerName names the node's spans.
const tracerName = "github.com/callerauth/callerauth/internal/services/vmafx/node"

// Why a measurement was stopped before its end.
var (
	errLeaseLost = errors.New("the controller refused a progress report")
	errTooLong   = errors.New("the measurement outlasted --max-job-duration")
)

type outcome struct {
	scores []measure.Score
	err    error
}

// measureJob measures a job's clips beneath the tenant's clip directory.
func (n *Node) measureJob(ctx context.Context, job *vmafxv1.Job, frames *atomic.Int64) ([]measure.Score, error) {
	spec := job.GetSpec()
	if len(validation.IsDNS1123Label(job.GetTenant())) > 0 { // a tenant is a DNS label: one path element
		return nil, measure.Unavailable("spec.reference", spec.GetReference())
	}
	dir, err := os.OpenRoot(filepath.Join(n.o.ClipRoot, job.GetTenant()))
	if err != nil {
		// The same sentence as a clip missing beneath it.
		return nil, measure.Unavailable("spec.reference", spec.GetReference())
	}
	defer dir.Close()
	return measure.Files(ctx, dir, spec.GetReference(), spec.GetDistorted(), spec.GetMetrics(), measure.Options{
		Progress: func(f int) { frames.Store(int64(f)) }, MaxFramePixels: n.o.MaxFramePixels, MaxFrames: n.o.MaxFrames})
}

// run measures a claimed job under a context that ends when the lease is
// lost (a progress report refused: another claim, a cancellation), when
// the measurement outlasts --max-job-duration (the job is given back) or
// when the node stops (the job is given back; the node waits at most
// --shutdown-timeout for the measurement to end). It returns only once the
// measurement has ended, so that a node never holds two jobs' frames.
//
// With traces on, a job is a trace of its own: a root span (vmafx.job)
// over the measurement (vmafx.measure) and the reports, which carry it to
// the controller. No clip, tenant or job name is in a span.
func (n *Node) run(ctx context.Context, job *vmafxv1.Job, lease string) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "vmafx.job", trace.WithNewRoot(),
		trace.WithAttributes(attribute.Int("vmafx.attempt", int(job.GetAttempts())), attribute.Int("vmafx.metrics", len(job.GetSpec().GetMetrics()))))
	defer span.End()
	mctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if n.o.MaxJobDuration > 0 {
		var stop context.CancelFunc
		mctx, stop = context.WithTimeoutCause(mctx, n.o.MaxJobDuration, errTooLong)
		defer stop()
	}
	var frames atomic.Int64
	// leaseEnd is when the claim lapses unless renewed: the outcome is
	// worth sending again until then (afterwards the job is queued again).
	leaseEnd := job.GetLeaseExpiresAt().AsTime()
	done := make(chan outcome, 1)
	go func() {
		sctx, mspan := spans.Start(mctx, tracerName, "vmafx.measure")
		scores, err := n.measureJob(sctx, job, &frames)
		if mspan.IsRecording() {
			mspan.SetAttributes(attribute.Int64("vmafx.frames", frames.Load()))
			if err != nil {
				mspan.SetAttributes(attribute.String("vmafx.reason", measure.ReasonOf(err)))
				spans.Fail(mspan, "the measurement did not complete")
			}
		}
		mspan.End()
		done <- outcome{scores, err}
	}()
	tick := time.NewTicker(n.o.ReportEvery)
	defer tick.Stop()
	for {
		select {
		case out := <-done:
			n.finish(ctx, mctx, job, lease, leaseEnd, out, frames.Load())
			return
		case <-ctx.Done():
			cancel(ctx.Err())
			n.giveBack(ctx, job, lease, "the node is stopping")
			select {
			case <-done:
			case <-time.After(n.o.Serve.ShutdownTimeout):
				n.log.Warn("node: the measurement did not end within --shutdown-timeout; exiting anyway", "job", job.GetId())
			}
			return
		case <-tick.C:
			// Progress renews the lease; a frame count is all a stream gives.
			r, err := n.client.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: job.GetId(), LeaseId: lease, State: vmafxv1.JobState_JOB_STATE_RUNNING,
				Progress: float64(frames.Load())})
			switch status.Code(err) {
			case codes.OK:
				leaseEnd = r.GetJob().GetLeaseExpiresAt().AsTime()
			case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied:
				// The job is no longer this claim's (cancelled, lease lost,
				// re-claimed): stop measuring it at once.
				n.jobs.WithLabelValues("stopped").Inc()
				n.log.Warn("node: stopping the job: the controller refused its progress report", "job", job.GetId(),
					"code", status.Code(err).String(), "err", status.Convert(err).Message())
				cancel(errLeaseLost)
				<-done
				return
			default:
				if ctx.Err() == nil {
					n.log.Warn("node: reporting progress", "job", job.GetId(), "err", status.Convert(err).Message())
				}
			}
		}
	}
}

// finish reports a measurement that ended by itself, or gives the job back
// when it outlasted --max-job-duration. An outcome answered Unavailable is
// sent again, under the same lease, every second until the lease would
// lapse: the controller answers a repeat of an outcome it stored with the
// job as it ended (the first answer was lost), so the job ends once.
func (n *Node) finish(ctx, mctx context.Context, job *vmafxv1.Job, lease string, leaseEnd time.Time, out outcome, frames int64) {
	switch cause := context.Cause(mctx); {
	case errors.Is(cause, errTooLong):
		n.giveBack(ctx, job, lease, fmt.Sprintf("the measurement outlasted --max-job-duration %s after %d frames", n.o.MaxJobDuration, frames))
		return
	case ctx.Err() != nil || cause != nil:
		return
	}
	report := &vmafxv1.ReportJobRequest{Id: job.GetId(), LeaseId: lease, State: vmafxv1.JobState_JOB_STATE_SUCCEEDED}
	if out.err != nil {
		report.State, report.Error, report.Reason = vmafxv1.JobState_JOB_STATE_FAILED, bounded(out.err.Error()), measure.ReasonOf(out.err)
	}
	for _, s := range out.scores {
		report.Scores = append(report.Scores, &vmafxv1.Score{Metric: s.Metric, Mean: s.Mean, Min: s.Min, Frames: s.Frames})
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("vmafx.job_state", report.GetState().String()))
	for attempt := 0; ; attempt++ {
		_, rerr := n.client.ReportJob(ctx, report)
		if rerr == nil {
			n.jobs.WithLabelValues(strings.ToLower(strings.TrimPrefix(report.GetState().String(), "JOB_STATE_"))).Inc()
			n.log.Info("node: reported", "job", job.GetId(), "state", report.GetState().String(), "frames", frames, "reason", report.GetReason(), "error", report.GetError())
			return
		}
		if status.Code(rerr) != codes.Unavailable || !time.Now().Add(time.Second).Before(leaseEnd) || ctx.Err() != nil {
			n.jobs.WithLabelValues("unreported").Inc()
			n.log.Error("node: the report was not accepted", "job", job.GetId(), "code", status.Code(rerr).String(), "err", status.Convert(rerr).Message())
			return
		}
		n.log.Warn("node: the outcome was not acknowledged; sending it again", "job", job.GetId(), "state", report.GetState().String(), "attempt", attempt+1,
			"err", status.Convert(rerr).Message())
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// giveBack hands the job back to the controller (queued again behind the
// tenant's other jobs), with a deadline of its own: the node may be
// stopping.
func (n *Node) giveBack(ctx context.Context, job *vmafxv1.Job, lease, why string) {
	span := trace.SpanFromContext(ctx) // the job's trace, whatever ctx's end
	span.SetAttributes(attribute.String("vmafx.job_state", vmafxv1.JobState_JOB_STATE_PENDING.String()))
	ctx, cancel := context.WithTimeout(trace.ContextWithSpan(context.Background(), span), 2*time.Second)
	defer cancel()
	_, err := n.client.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: job.GetId(), LeaseId: lease, State: vmafxv1.JobState_JOB_STATE_PENDING, Error: why})
	n.jobs.WithLabelValues("given_back").Inc()
	n.log.Warn("node: giving the job back", "job", job.GetId(), "why", why, "accepted", err == nil, "err", status.Convert(err).Message())
}

// bounded cuts a report's error message to what the controller accepts.
func bounded(s string) string {
	if len(s) <= 2000 {
		return s
	}
	return strings.ToValidUTF8(s[:2000], "") + "…"
}

// NewCommand is the vmafx-node command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	o := NewOptions(os.Getenv("POD_NAME"))
	cmd := &cobra.Command{
		Use:   "vmafx-node",
		Short: "Claim vmafx jobs, measure PSNR and SSIM, report the scores",
		Long: `vmafx-node polls the controller's ClaimJob, measures the claimed job (luma PSNR
and SSIM between two Y4M 8-bit 4:2:0 clips) and reports. Its controller
connection is the "controller" section of --config and the VMAFX_CONTROLLER_*
environment variables (docs/vmafx.md); the token file is read on every call.`,
	}
	serve.Command(cmd, &o.Serve, stderr, serve.Complete(&o, New))
	o.AddFlags(cmd.Flags())
	return cmd
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
