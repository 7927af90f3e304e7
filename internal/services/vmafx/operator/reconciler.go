// Package operator is the vmafx operator: its VmafxJob reconciler submits
// each VmafxJob to the vmafx controller once and polls GetJob until the job
// finishes, writing what the controller says into the object's status. It
// reaches the controller through the one credentials package, as the node
// does: TLS, a bearer token re-read from its file on every call, an expired
// JWT never sent and reported as that file and expiry.
package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	jobsv1 "github.com/callerauth/callerauth/api/vmafxjob/v1alpha1"
	"github.com/callerauth/callerauth/token"
)

// Reasons on the ControllerReachable condition and on Events, beside the
// controller's own refusal reasons (role_missing, token_invalid, …).
const (
	ReasonTokenExpired    = "TokenExpired"
	ReasonTokenUnreadable = "TokenUnreadable"
	ReasonUnreachable     = "ControllerUnreachable"
	ReasonNotFound        = "JobNotFound"
	ReasonAccepted        = "Accepted"
	ReasonPolling         = "Polling"
	ReasonCancelled       = "Cancelled"
)

// Finalizer holds a VmafxJob that is deleted until its job is cancelled at
// the controller, so that a deleted object never leaves a node measuring.
const Finalizer = "vmafx.callerauth.dev/cancel"

func finished(phase string) bool {
	return phase == jobsv1.PhaseSucceeded || phase == jobsv1.PhaseFailed || phase == jobsv1.PhaseCancelled
}

// Reconciler reconciles VmafxJobs against the vmafx controller.
type Reconciler struct {
	Client client.Client
	// Jobs is the controller's JobService, dialled with the operator's
	// credentials.
	Jobs vmafxv1.JobServiceClient
	// Tokens is the token source those credentials read (expiry-checked),
	// read once more before each call so that a stalled refresher is
	// reported as its file and expiry rather than as a bare refusal. Nil
	// when no token is configured.
	Tokens token.Source
	// Poll is the interval between GetJob calls of a running job. Default
	// 5 s.
	Poll time.Duration
	// Events records Kubernetes Events; nil records none.
	Events events.EventRecorder
	Log    *slog.Logger
}

// Reconcile submits the job once, then follows it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	poll := r.Poll
	if poll <= 0 {
		poll = 5 * time.Second
	}
	var job jobsv1.VmafxJob
	if err := r.Client.Get(ctx, req.NamespacedName, &job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !job.DeletionTimestamp.IsZero() {
		return r.deleted(ctx, &job, poll)
	}
	if finished(job.Status.Phase) {
		return ctrl.Result{}, nil // finished: no more polling
	}
	if controllerutil.AddFinalizer(&job, Finalizer) {
		if err := r.Client.Update(ctx, &job); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return ctrl.Result{}, fmt.Errorf("operator: adding the finalizer to %s/%s: %w", job.Namespace, job.Name, err)
		}
	}
	before := job.Status.DeepCopy()
	if job.Status.Phase == "" {
		job.Status.Phase = jobsv1.PhasePending
	}
	job.Status.ObservedGeneration = job.Generation
	if reason, msg := r.tokenProblem(ctx); reason != "" {
		r.unreachable(&job, reason, msg)
		return r.save(ctx, &job, before, poll)
	}
	var remote *vmafxv1.Job
	var err error
	if job.Status.JobID == "" && job.Spec.JobID != "" {
		job.Status.JobID = job.Spec.JobID // track a job submitted elsewhere
	}
	if job.Status.JobID == "" {
		var resp *vmafxv1.SubmitJobResponse
		resp, err = r.Jobs.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{
			Spec:      &vmafxv1.JobSpec{Reference: job.Spec.Reference, Distorted: job.Spec.Distorted, Metrics: job.Spec.Metrics},
			RequestId: string(job.UID), // a retry after a lost reply finds the same job
		})
		if err == nil {
			remote = resp.GetJob()
			job.Status.JobID = remote.GetId()
			meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: jobsv1.ConditionSubmitted, Status: metav1.ConditionTrue,
				Reason: ReasonAccepted, Message: "the controller accepted job " + remote.GetId(), ObservedGeneration: job.Generation})
			r.event(&job, corev1.EventTypeNormal, ReasonAccepted, "Submitted", "the controller accepted job "+remote.GetId())
		}
	} else {
		var resp *vmafxv1.GetJobResponse
		resp, err = r.Jobs.GetJob(ctx, &vmafxv1.GetJobRequest{Id: job.Status.JobID})
		remote = resp.GetJob()
	}
	if err != nil {
		reason, msg := refusal(err)
		r.unreachable(&job, reason, msg)
		return r.save(ctx, &job, before, poll)
	}
	meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: jobsv1.ConditionControllerReachable, Status: metav1.ConditionTrue,
		Reason: ReasonPolling, Message: "GetJob answers", ObservedGeneration: job.Generation})
	job.Status.Message = remote.GetError()
	switch remote.GetState() {
	case vmafxv1.JobState_JOB_STATE_RUNNING:
		job.Status.Phase = jobsv1.PhaseRunning
	case vmafxv1.JobState_JOB_STATE_SUCCEEDED:
		job.Status.Phase = jobsv1.PhaseSucceeded
	case vmafxv1.JobState_JOB_STATE_FAILED:
		job.Status.Phase = jobsv1.PhaseFailed
		if remote.GetReason() != "" {
			job.Status.Message = remote.GetReason() + ": " + remote.GetError()
		}
	case vmafxv1.JobState_JOB_STATE_CANCELLED:
		job.Status.Phase = jobsv1.PhaseCancelled
	default:
		job.Status.Phase = jobsv1.PhasePending
	}
	job.Status.Scores, job.Status.Summary = scores(remote.GetScores())
	if finished(job.Status.Phase) {
		meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: jobsv1.ConditionFinished, Status: metav1.ConditionTrue,
			Reason: job.Status.Phase, Message: strings.TrimSpace(job.Status.Summary + " " + job.Status.Message), ObservedGeneration: job.Generation})
		r.event(&job, corev1.EventTypeNormal, job.Status.Phase, "Finished", "job "+job.Status.JobID+" "+strings.ToLower(job.Status.Phase))
		return r.save(ctx, &job, before, 0)
	}
	return r.save(ctx, &job, before, poll)
}

// deleted cancels the job of a VmafxJob being deleted, unless it finished,
// then lets the object go. A controller that cannot be reached keeps the
// finalizer, and the deletion waits and is retried.
func (r *Reconciler) deleted(ctx context.Context, job *jobsv1.VmafxJob, poll time.Duration) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(job, Finalizer) {
		return ctrl.Result{}, nil
	}
	if job.Status.JobID != "" && !finished(job.Status.Phase) {
		if reason, msg := r.tokenProblem(ctx); reason != "" {
			r.unreachable(job, reason, msg)
			return ctrl.Result{RequeueAfter: poll}, nil
		}
		_, err := r.Jobs.CancelJob(ctx, &vmafxv1.CancelJobRequest{Id: job.Status.JobID})
		switch status.Code(err) {
		case codes.OK:
			r.event(job, corev1.EventTypeNormal, ReasonCancelled, "Cancel", "the VmafxJob was deleted: job "+job.Status.JobID+" cancelled at the controller")
		case codes.NotFound, codes.FailedPrecondition:
			// Gone, or finished meanwhile: nothing to stop.
		default:
			reason, msg := refusal(err)
			r.unreachable(job, reason, "cancelling the job of a deleted VmafxJob: "+msg)
			return ctrl.Result{RequeueAfter: poll}, nil
		}
	}
	controllerutil.RemoveFinalizer(job, Finalizer)
	if err := r.Client.Update(ctx, job); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("operator: removing the finalizer of %s/%s: %w", job.Namespace, job.Name, err)
	}
	return ctrl.Result{}, nil
}

// tokenProblem reads the token as the next call would: an expired JWT in
// the file, or a file that cannot be read, is reported by name.
func (r *Reconciler) tokenProblem(ctx context.Context) (reason, msg string) {
	if r.Tokens == nil {
		return "", ""
	}
	_, err := r.Tokens.Token(ctx)
	var expired *token.ExpiredError
	switch {
	case err == nil:
		return "", ""
	case errors.As(err, &expired):
		return ReasonTokenExpired, fmt.Sprintf("the token from %s expired at %s; not sending it — is its refresher running?", expired.Source, expired.Expiry.UTC().Format(time.RFC3339))
	default:
		return ReasonTokenUnreadable, err.Error()
	}
}

// refusal turns a controller error into a condition reason (the refusal's
// stable reason when it carries one) and a message.
func refusal(err error) (reason, msg string) {
	st := status.Convert(err)
	reason = ReasonUnreachable
	if st.Code() == codes.NotFound {
		reason = ReasonNotFound
	}
	msg = st.Code().String() + ": " + st.Message()
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "" {
			reason = info.GetReason()
			if role := info.GetMetadata()["required_role"]; role != "" {
				msg += " (required role " + role + ")"
			}
		}
	}
	return conditionReason(reason), msg
}

// conditionReason makes a refusal reason a valid condition reason
// (CamelCase letters): role_missing → RoleMissing.
func conditionReason(r string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(r, func(c rune) bool { return c == '_' || c == '-' || c == ' ' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	if b.Len() == 0 {
		return ReasonUnreachable
	}
	return b.String()
}

func (r *Reconciler) unreachable(job *jobsv1.VmafxJob, reason, msg string) {
	job.Status.Message = msg
	changed := meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: jobsv1.ConditionControllerReachable, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: job.Generation})
	if changed {
		r.event(job, corev1.EventTypeWarning, reason, "Poll", msg)
	}
	if r.Log != nil {
		r.Log.Warn("operator: the controller did not answer for the job", "vmafxjob", job.Namespace+"/"+job.Name, "reason", reason, "detail", msg)
	}
}

func (r *Reconciler) event(job *jobsv1.VmafxJob, kind, reason, action, msg string) {
	if r.Events != nil {
		r.Events.Eventf(job, nil, kind, reason, action, "%s", msg)
	}
}

// save writes the status when it changed and asks to be called again
// after requeue (0: not again).
func (r *Reconciler) save(ctx context.Context, job *jobsv1.VmafxJob, before *jobsv1.VmafxJobStatus, requeue time.Duration) (ctrl.Result, error) {
	if !statusEqual(before, &job.Status) {
		if err := r.Client.Status().Update(ctx, job); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: time.Second}, nil // someone else wrote it: read again
			}
			return ctrl.Result{}, fmt.Errorf("operator: writing the status of %s/%s: %w", job.Namespace, job.Name, err)
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func statusEqual(a, b *jobsv1.VmafxJobStatus) bool {
	if a.Phase != b.Phase || a.JobID != b.JobID || a.Summary != b.Summary || a.Message != b.Message || a.ObservedGeneration != b.ObservedGeneration ||
		len(a.Conditions) != len(b.Conditions) || len(a.Scores) != len(b.Scores) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	for i := range a.Scores {
		if a.Scores[i] != b.Scores[i] {
			return false
		}
	}
	return true
}

func scores(in []*vmafxv1.Score) ([]jobsv1.Score, string) {
	var out []jobsv1.Score
	var parts []string
	for _, s := range in {
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
		out = append(out, jobsv1.Score{Metric: s.GetMetric(), Mean: f(s.GetMean()), Min: f(s.GetMin()), Frames: s.GetFrames()})
		parts = append(parts, s.GetMetric()+"="+f(s.GetMean()))
	}
	return out, strings.Join(parts, " ")
}
