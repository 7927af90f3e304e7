package controller_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
)

// TestJobTransitionsAreSpans: under a recording span (traces on), each
// job transition is a child span naming the state it left the job in.
func TestJobTransitionsAreSpans(t *testing.T) {
	store, err := controller.OpenStore(filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := &controller.Service{Store: store, Lease: time.Minute, MaxAttempts: 3}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	// The controller's spans use the process's provider.
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "rpc")
	ctx = guard.NewContext(ctx, &guard.Verdict{Allowed: true, Caller: &authn.Caller{Username: "ci", Tenant: "tenant-a",
		Roles: []string{controller.RoleSubmitter, controller.RoleReader, controller.RoleNode}}})
	sub, err := svc.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "r.y4m", Distorted: "d.y4m", Metrics: []string{"psnr"}}})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := svc.ClaimJob(ctx, &vmafxv1.ClaimJobRequest{NodeName: "node-a", ClaimKey: "k1"})
	if err != nil || claim.GetJob().GetId() != sub.GetJob().GetId() {
		t.Fatalf("claim: %v %v", claim, err)
	}
	if _, err := svc.ReportJob(ctx, &vmafxv1.ReportJobRequest{Id: claim.GetJob().GetId(), LeaseId: claim.GetLeaseId(), State: vmafxv1.JobState_JOB_STATE_FAILED, Error: "no clip"}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	want := map[string]string{"vmafx.submit": "JOB_STATE_PENDING", "vmafx.claim": "JOB_STATE_RUNNING", "vmafx.report": ""}
	for _, s := range rec.Ended() {
		w, ok := want[s.Name()]
		if !ok {
			continue
		}
		delete(want, s.Name())
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s's parent is not the call's span", s.Name())
		}
		var state string
		for _, a := range s.Attributes() {
			if a.Key == "vmafx.job_state" {
				state = a.Value.AsString()
			}
		}
		if state == "" || (w != "" && state != w) {
			t.Errorf("%s: job state %q, want %q", s.Name(), state, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("no span of %v", want)
	}
}
