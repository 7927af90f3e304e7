package vmafx_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/internal/kit/jaeger"
	"github.com/callerauth/callerauth/internal/services/vmafx/clipgen"
)

// TestJobTrace: with traces on, a node's job is a trace of its own in a
// real OTLP receiver (Jaeger): the job's root span on the node, the
// measurement under it, and the controller's handling of the node's
// report continuing it — with no token, clip, tenant or subject in any
// span.
func TestJobTrace(t *testing.T) {
	ctx := context.Background()
	j, err := jaeger.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Stop()
	w := newWorldWith(t, "", "--otlp-endpoint", j.OTLP, "--otlp-insecure")
	now := time.Now()
	submitToken := w.mint("tenant-a", "ci-a", now, "vmafx:submitter", "vmafx:reader")
	submitter := w.client(submitToken)
	clips := w.clipDir("tenant-a")
	for name, spec := range map[string]clipgen.Spec{"trace-ref.y4m": {Width: 64, Height: 48, Frames: 6}, "trace-dist.y4m": {Width: 64, Height: 48, Frames: 6, Noise: 8, Seed: 2}} {
		if err := clipgen.WriteFile(filepath.Join(clips, name), spec); err != nil {
			t.Fatal(err)
		}
	}
	nodeToken := w.mint("tenant-a", "node-t1", now, "vmafx:node")
	tokFile := filepath.Join(w.dir, "node-t1.token")
	write(t, tokFile, nodeToken)
	n := w.node("node-t1", tokFile, "--otlp-endpoint", j.OTLPHTTP, "--otlp-protocol", "http", "--otlp-insecure")
	defer func() { _ = n.Stop() }()
	sub, err := submitter.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: &vmafxv1.JobSpec{Reference: "trace-ref.y4m", Distorted: "trace-dist.y4m", Metrics: []string{"psnr"}}})
	if err != nil {
		t.Fatal(err)
	}
	w.wait(submitter, sub.GetJob().GetId(), succeeded)

	// The processes export in batches (every 5 s).
	var tr jaeger.Trace
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		found, err := j.Traces(ctx, "vmafx-node", "vmafx.job", 5)
		if err == nil && len(found) > 0 {
			tr = found[0]
			services := map[string]bool{}
			for _, s := range tr.Spans {
				services[tr.Service(s)] = true
			}
			if services["vmafx-controller"] && len(tr.Spans) >= 4 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no vmafx.job trace with the controller's spans in Jaeger: %v, %d traces", err, len(found))
		}
	}
	byName := map[string]jaeger.Span{}
	for _, s := range tr.Spans {
		byName[tr.Service(s)+"/"+s.OperationName] = s
		for _, kv := range s.Tags {
			v := fmt.Sprint(kv.Value)
			for _, secret := range []string{nodeToken, submitToken, "trace-ref", "tenant-a", "node-t1", sub.GetJob().GetId()} {
				if strings.Contains(v, secret) {
					t.Errorf("%s's span %s carries %s = %.60s…", tr.Service(s), s.OperationName, kv.Key, v)
				}
			}
		}
	}
	root, measure, report := byName["vmafx-node/vmafx.job"], byName["vmafx-node/vmafx.measure"], byName["vmafx-controller/vmafx.report"]
	if root.SpanID == "" || measure.SpanID == "" || report.SpanID == "" {
		var have []string
		for k := range byName {
			have = append(have, k)
		}
		t.Fatalf("spans of the job's trace: %v", have)
	}
	if root.Parent() != "" {
		t.Errorf("the job's span has a parent: %s", root.Parent())
	}
	if measure.Parent() != root.SpanID {
		t.Error("the measurement is not under the job's span")
	}
	if tag(root, "vmafx.job_state") != vmafxv1.JobState_JOB_STATE_SUCCEEDED.String() || tag(measure, "vmafx.frames") != "6" {
		t.Errorf("the job's state %q, frames measured %q", tag(root, "vmafx.job_state"), tag(measure, "vmafx.frames"))
	}
	// The controller's report span is under its server span, which
	// continues the node's job span (the traceparent the node sent).
	var chain []string
	for s := report; s.SpanID != ""; {
		chain = append(chain, tr.Service(s)+"/"+s.OperationName)
		if s.SpanID == root.SpanID {
			break
		}
		next, ok := spanByID(tr, s.Parent())
		if !ok {
			t.Fatalf("the controller's report span does not lead back to the node's job span: %v", chain)
		}
		s = next
	}
}

func spanByID(tr jaeger.Trace, id string) (jaeger.Span, bool) {
	for _, s := range tr.Spans {
		if s.SpanID == id {
			return s, true
		}
	}
	return jaeger.Span{}, false
}

func tag(s jaeger.Span, key string) string {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}
