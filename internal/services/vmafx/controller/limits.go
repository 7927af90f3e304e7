package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/services/vmafx/measure"
	"github.com/callerauth/callerauth/reason"
)

// Reasons of the JobService's own refusals (after the guard's), in the
// ErrorInfo of the status and in the refusal's log line; a store that
// fails answers datastore.ReasonUnavailable.
var (
	ReasonInvalidArgument = reason.New("invalid_argument", reason.InvalidArgument, "the request breaks a limit or names something malformed")
	ReasonJobNotFound     = reason.New("job_not_found", reason.NotFound, "no such job in your tenant")
	ReasonConflict        = reason.New("job_conflict", reason.FailedPrecondition, "the job is not in a state that allows this")
	ReasonPendingQuota    = reason.New("tenant_pending_quota", reason.ResourceExhausted, "the tenant has as many jobs unfinished (PENDING or RUNNING) as its quota allows (--max-pending-jobs, --tenant-quota); retry once some have finished")
	ReasonJobsQuota       = reason.New("tenant_jobs_quota", reason.ResourceExhausted, "the tenant has as many jobs stored as it may (--max-jobs-per-tenant); retry once finished ones have expired (--finished-job-retention)")
	ReasonSubmissionRate  = reason.New("tenant_submission_rate", reason.ResourceExhausted, "the tenant submitted as many jobs this minute as its quota allows (--max-submissions-per-minute, --tenant-quota); retry after the delay the message gives")
)

// ReasonMeasurementFailed is the reason of a FAILED report that names
// none.
const ReasonMeasurementFailed = "measurement_failed"

// Limits of what a caller may send.
const (
	maxRequestID   = 128
	maxNodeName    = 253
	maxErrorBytes  = 2048
	maxProgress    = 1e9
	maxReasonBytes = 64
)

var reasonWord = regexp.MustCompile(`^[a-z][a-z_]{0,63}$`)

// errBadReport is a report whose scores do not fit the job.
var errBadReport = errors.New("scores")

// refuse is a status with its reason in an ErrorInfo, as the guard's are,
// and the reason's code.
func refuse(r reason.Reason, msg string) error { return guard.Refuse(r, msg) }

// CheckSpec refuses a spec over a limit, naming the field and the limit:
// each clip a path relative to the tenant's clip directory of at most
// measure.MaxPathBytes, the metrics each known and listed once.
func CheckSpec(spec *vmafxv1.JobSpec) error {
	return errors.Join(measure.CheckPath("spec.reference", spec.GetReference()),
		measure.CheckPath("spec.distorted", spec.GetDistorted()),
		measure.ParseMetrics(spec.GetMetrics()))
}

// CheckReport refuses a report value that is not finite or out of range,
// naming the field.
func CheckReport(r *vmafxv1.ReportJobRequest) error {
	p := r.GetProgress()
	if math.IsNaN(p) || math.IsInf(p, 0) || p < 0 || p > maxProgress {
		return fmt.Errorf("progress: %v: want a frame count from 0 to %g", p, float64(maxProgress))
	}
	if len(r.GetLeaseId()) > 64 {
		return errors.New("lease_id: longer than any lease ClaimJob gives")
	}
	if n := len(r.GetError()); n > maxErrorBytes || !utf8.ValidString(r.GetError()) {
		return fmt.Errorf("error: %d bytes; want UTF-8 of at most %d", n, maxErrorBytes)
	}
	if rs := r.GetReason(); rs != "" && !reasonWord.MatchString(rs) {
		return fmt.Errorf("reason: want a stable word (a-z and '_', at most %d bytes)", maxReasonBytes)
	}
	switch r.GetState() {
	case vmafxv1.JobState_JOB_STATE_FAILED:
		if r.GetError() == "" {
			return errors.New("error: a FAILED report needs an error message")
		}
		switch r.GetReason() {
		case "":
			r.Reason = ReasonMeasurementFailed
		case ReasonCancelled, ReasonAttemptsExhausted:
			return fmt.Errorf("reason: %s is the controller's own; a node reports why its measurement failed (e.g. %s)", r.GetReason(), ReasonMeasurementFailed)
		}
	case vmafxv1.JobState_JOB_STATE_SUCCEEDED:
		if len(r.GetScores()) == 0 {
			return errors.New("scores: a SUCCEEDED report needs one score per metric of the job")
		}
	}
	if len(r.GetScores()) > 0 && r.GetState() != vmafxv1.JobState_JOB_STATE_SUCCEEDED {
		return fmt.Errorf("scores: only a SUCCEEDED report carries scores, not %s", r.GetState())
	}
	if len(r.GetScores()) > len(measure.Known) {
		return fmt.Errorf("scores: %d; at most %d", len(r.GetScores()), len(measure.Known))
	}
	for i, sc := range r.GetScores() {
		lo, hi := 0.0, measure.MaxPSNR
		switch sc.GetMetric() {
		case measure.PSNR:
		case measure.SSIM:
			lo, hi = -1, 1
		default:
			return fmt.Errorf("scores[%d].metric: not one of %v", i, measure.Known)
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"mean", sc.GetMean()}, {"min", sc.GetMin()}} {
			if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < lo || f.v > hi {
				return fmt.Errorf("scores[%d].%s: %v: want a finite %s from %g to %g", i, f.name, f.v, sc.GetMetric(), lo, hi)
			}
		}
		if sc.GetFrames() < 1 || sc.GetFrames() > maxProgress {
			return fmt.Errorf("scores[%d].frames: %d: want 1 to %g", i, sc.GetFrames(), float64(maxProgress))
		}
	}
	return nil
}

// ScoresMatch checks that a SUCCEEDED report's scores are the job's
// metrics, each once.
func ScoresMatch(scores []*vmafxv1.Score, metrics []string) error {
	var seen []string
	for i, sc := range scores {
		switch {
		case !slices.Contains(metrics, sc.GetMetric()):
			return fmt.Errorf("%w[%d].metric: %s is not a metric of the job", errBadReport, i, sc.GetMetric())
		case slices.Contains(seen, sc.GetMetric()):
			return fmt.Errorf("%w[%d].metric: %s is reported twice", errBadReport, i, sc.GetMetric())
		}
		seen = append(seen, sc.GetMetric())
	}
	if len(seen) != len(metrics) {
		return fmt.Errorf("%w: %d reported; the job asks for %d", errBadReport, len(seen), len(metrics))
	}
	return nil
}

// logRefusals logs every refusal a JobService handler answers — one line
// with the method, the tenant and caller, the code and the reason — as the
// guard logs its own. What a caller sent is never repeated beyond the
// bounded message.
func logRefusals(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err == nil {
			return resp, nil
		}
		st := status.Convert(err)
		reason := ""
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				reason = ei.GetReason()
			}
		}
		attrs := []any{"method", info.FullMethod, "code", st.Code().String(), "reason", reason, "detail", st.Message()}
		if v, ok := guard.FromContext(ctx); ok && v.Caller != nil {
			attrs = append(attrs, "tenant", v.Caller.Tenant, "caller", v.Caller.Username)
		}
		log.WarnContext(ctx, "controller: refused", attrs...)
		return resp, err
	}
}

// Reasons are every refusal the JobService can send: the authentication
// failures, the role rule's, a request it could not read, the datastore's
// and its own. docs/vmafx.md lists each; test/reasons holds the code to
// this list.
func Reasons() []reason.Reason {
	return reason.Union(binding.Reasons(binding.Roles(binding.RoleConfig{})), guard.ReasonBadRequest, datastore.ReasonUnavailable,
		ReasonInvalidArgument, ReasonJobNotFound, ReasonConflict, ReasonPendingQuota, ReasonJobsQuota, ReasonSubmissionRate)
}
