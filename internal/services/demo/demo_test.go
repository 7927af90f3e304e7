package demo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/demo"
)

func TestDemoAllScenariosPass(t *testing.T) {
	results, err := demo.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) < 32 {
		t.Fatalf("%d scenarios; want at least 32", len(results))
	}
	for _, r := range results {
		if !r.Pass {
			t.Errorf("%s: expected %q, observed %q", r.Scenario, r.Expected, r.Observed)
		}
	}
	var out bytes.Buffer
	demo.Print(&out, results)
	if !strings.Contains(out.String(), "SCENARIO") || !strings.Contains(out.String(), "passed, 0 failed") {
		t.Fatalf("table:\n%s", out.String())
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
