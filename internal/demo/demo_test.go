package demo_test

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/internal/demo"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/services/cli"
)

// TestDemoAllScenariosPass runs `callerauth demo` as cmd/callerauth
// builds it — the CLI with the demo added — and wants every scenario (39
// or more) passed, each row saying pass.
func TestDemoAllScenariosPass(t *testing.T) {
	var out capture.Buffer
	err := cli.Execute(context.Background(), &cli.Options{Stdout: &out, Stderr: &out, More: []func(io.Writer) *cobra.Command{demo.NewCommand}}, []string{"demo"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`demo: (\d+) passed, 0 failed`).FindStringSubmatch(out.String())
	n := 0
	if m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	if m == nil || strings.Count(out.String(), " pass\n") != n || n < 39 || !strings.Contains(out.String(), "SCENARIO") {
		t.Fatalf("want every scenario (39 or more) passed, each row saying pass:\n%s", out.String())
	}
}

func TestAllPassed(t *testing.T) {
	if demo.AllPassed(nil) {
		t.Error("no results counted as passing")
	}
	if demo.AllPassed([]demo.Result{{Pass: true}, {Pass: false}}) {
		t.Error("a failure counted as passing")
	}
	var out bytes.Buffer
	demo.Print(&out, []demo.Result{{Scenario: "s", Pass: false}})
	if !strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), "0 passed, 1 failed") {
		t.Fatalf("table:\n%s", out.String())
	}
}
