package jobcli

import (
	"bytes"
	"strings"
	"testing"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
)

// TestTableEscapesWhatATerminalWouldObey: a node name or reason holding
// an escape sequence or a bidirectional override (stored by a controller
// of an older version) is printed quoted with Go's escapes, never raw; a
// plain one as it is.
func TestTableEscapesWhatATerminalWouldObey(t *testing.T) {
	var b bytes.Buffer
	jobs := []*vmafxv1.Job{
		{Id: "j1", Node: "node\x1b[2J\x1b[31mred", Reason: "x\u202ey"},
		{Id: "j2", Node: "gpu-node-1", Reason: "measurement_failed"},
	}
	if err := printJobs(&b, "table", nil, jobs...); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\u202e") {
		t.Fatalf("the table carries raw control characters: %q", out)
	}
	for _, want := range []string{`"node\x1b[2J\x1b[31mred"`, `"x\u202ey"`, "gpu-node-1", "measurement_failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %s:\n%s", want, out)
		}
	}
}
