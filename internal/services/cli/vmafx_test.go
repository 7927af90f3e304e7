package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/demo"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
	"github.com/callerauth/callerauth/internal/services/vmafx/jobcli"
)

// vmafxConfig writes a client configuration for the world's controller
// with a token file holding tok, and returns its path.
func vmafxConfig(t *testing.T, w *demo.VmafxWorld, name, tok string) string {
	t.Helper()
	p, err := w.ClientConfig(name, tok)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type jobJSON struct {
	ID       string  `json:"id"`
	State    string  `json:"state"`
	Progress float64 `json:"progress"`
	Scores   []struct {
		Metric string  `json:"metric"`
		Mean   float64 `json:"mean"`
	} `json:"scores"`
}

func jobOf(t *testing.T, r *run) jobJSON {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr.String())
	}
	var out struct{ Job jobJSON }
	if err := json.Unmarshal(r.stdout.Bytes(), &out); err != nil || out.Job.ID == "" {
		t.Fatalf("not a job: %v\n%s", err, r.stdout.String())
	}
	return out.Job
}

// TestVmafxCLI runs the vmafx commands against the real controller (and a
// node) on loopback TLS: submit, an idempotent resubmit, list a page at a
// time, cancel, watch to SUCCEEDED, and the refusals — a reader's submit
// naming the role it lacks, another tenant's job NotFound, an unreachable
// controller — each with its exit code.
func TestVmafxCLI(t *testing.T) {
	w, err := demo.StartVmafx(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ref, dist, err := w.Clips()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ci := vmafxConfig(t, w, "ci-a", w.Mint("tenant-a", "ci-a", controller.RoleSubmitter, controller.RoleReader))
	dash := vmafxConfig(t, w, "dash-a", w.Mint("tenant-a", "dash-a", controller.RoleReader))
	other := vmafxConfig(t, w, "ci-b", w.Mint("tenant-b", "ci-b", controller.RoleSubmitter, controller.RoleReader))
	vmafx := func(config string, args ...string) *run {
		return execute(ctx, t, "", time.Time{}, append([]string{"vmafx", "--config", config}, args...)...)
	}

	first := jobOf(t, vmafx(ci, "submit", "--reference", ref, "--distorted", dist, "--request-id", "nightly-1", "-o", "json"))
	if first.State != "JOB_STATE_PENDING" {
		t.Fatalf("submitted: %+v", first)
	}
	// A retry after a lost answer: the same job, not a second one.
	if again := jobOf(t, vmafx(ci, "submit", "--reference", ref, "--distorted", dist, "--request-id", "nightly-1", "-o", "json")); again.ID != first.ID {
		t.Fatalf("the resubmit queued %s; want %s", again.ID, first.ID)
	}
	// A spec from a file.
	spec := filepath.Join(t.TempDir(), "job.yaml")
	_ = os.WriteFile(spec, []byte("reference: "+ref+"\ndistorted: "+dist+"\nmetrics: [psnr]\n"), 0o600)
	cancelled := jobOf(t, vmafx(ci, "submit", "-f", spec, "-o", "json"))
	if r := vmafx(ci, "cancel", cancelled.ID, "-o", "yaml"); r.err != nil || !strings.Contains(r.stdout.String(), "state: JOB_STATE_CANCELLED") {
		t.Fatalf("cancel: %v\n%s", r.err, r.stdout.String())
	}
	third := jobOf(t, vmafx(ci, "submit", "--reference", ref, "--distorted", dist, "-o", "json"))

	// Paging: two pages of two and one; --all reads them all.
	r := vmafx(ci, "list", "--page-size", "2", "-o", "json")
	var page struct {
		Jobs          []jobJSON `json:"jobs"`
		NextPageToken string    `json:"nextPageToken"`
	}
	if err := json.Unmarshal(r.stdout.Bytes(), &page); err != nil || len(page.Jobs) != 2 || page.NextPageToken == "" {
		t.Fatalf("first page: %v %v\n%s", r.err, err, r.stdout.String())
	}
	r = vmafx(ci, "list", "--page-size", "2", "--page-token", page.NextPageToken, "-o", "json")
	page.Jobs, page.NextPageToken = nil, ""
	if err := json.Unmarshal(r.stdout.Bytes(), &page); err != nil || len(page.Jobs) != 1 || page.NextPageToken != "" {
		t.Fatalf("second page: %v %v\n%s", r.err, err, r.stdout.String())
	}
	if r := vmafx(ci, "list", "--page-size", "1", "--all"); r.err != nil || strings.Count(r.stdout.String(), "\n") != 4 || !strings.Contains(r.stdout.String(), "ID  ") {
		t.Fatalf("--all as a table: %v\n%s", r.err, r.stdout.String())
	}
	if r := vmafx(ci, "list", "--state", "cancelled", "-o", "json"); r.err != nil || !strings.Contains(r.stdout.String(), cancelled.ID) || strings.Contains(r.stdout.String(), first.ID) {
		t.Fatalf("--state cancelled: %v\n%s", r.err, r.stdout.String())
	}

	// The refusals, each saying why and with its exit code.
	r = vmafx(dash, "submit", "--reference", ref, "--distorted", dist)
	if jobcli.ExitCode(r.err) != jobcli.ExitRefused || !strings.Contains(r.err.Error(), "PermissionDenied role_missing, needs role vmafx:submitter") {
		t.Fatalf("a reader's submit: exit %d, %v", jobcli.ExitCode(r.err), r.err)
	}
	r = vmafx(other, "get", first.ID)
	if jobcli.ExitCode(r.err) != jobcli.ExitRefused || !strings.Contains(r.err.Error(), "NotFound job_not_found") {
		t.Fatalf("another tenant's job: exit %d, %v", jobcli.ExitCode(r.err), r.err)
	}
	unreachable := strings.Replace(string(must(os.ReadFile(ci))), w.Addr(), "127.0.0.1:1", 1)
	_ = os.WriteFile(ci+".down", []byte(unreachable), 0o600)
	r = vmafx(ci+".down", "get", first.ID, "--timeout", "2s")
	if jobcli.ExitCode(r.err) != jobcli.ExitUnreachable || !strings.Contains(r.err.Error(), "no answer from the controller (Unavailable") {
		t.Fatalf("an unreachable controller: exit %d, %v", jobcli.ExitCode(r.err), r.err)
	}

	// What fails here, not at the controller, is a local error (exit 1)
	// saying what to fix: a token file that is missing (nothing was sent),
	// a server name the certificate does not hold, a --timeout of zero.
	cfgText := string(must(os.ReadFile(ci)))
	tokenLine := cfgText[strings.Index(cfgText, "token_file: "):]
	missing := filepath.Join(t.TempDir(), "gone.token")
	_ = os.WriteFile(ci+".notoken", []byte(strings.Replace(cfgText, tokenLine, "token_file: "+missing+"\n", 1)), 0o600)
	r = vmafx(ci+".notoken", "get", first.ID)
	if jobcli.ExitCode(r.err) != 1 || !strings.Contains(r.err.Error(), missing) || !strings.Contains(r.err.Error(), "nothing was sent") {
		t.Fatalf("a missing token file: exit %d, %v; want 1 naming the file", jobcli.ExitCode(r.err), r.err)
	}
	// With the controller down too: still the token's error, exit 1 (on
	// ae46db4, exit 4: gRPC reads the token only once connected).
	_ = os.WriteFile(ci+".notoken.down", []byte(strings.Replace(strings.Replace(cfgText, tokenLine, "token_file: "+missing+"\n", 1), w.Addr(), "127.0.0.1:1", 1)), 0o600)
	r = vmafx(ci+".notoken.down", "get", first.ID, "--timeout", "2s")
	if jobcli.ExitCode(r.err) != 1 || !strings.Contains(r.err.Error(), missing) || !strings.Contains(r.err.Error(), "nothing was sent") {
		t.Fatalf("a missing token file, the controller down: exit %d, %v; want 1 naming the file", jobcli.ExitCode(r.err), r.err)
	}
	_ = os.WriteFile(ci+".wrongname", []byte(strings.Replace(cfgText, "server_name: 127.0.0.1", "server_name: wrong.example", 1)), 0o600)
	r = vmafx(ci+".wrongname", "get", first.ID)
	if jobcli.ExitCode(r.err) != 1 || !strings.Contains(r.err.Error(), "server name (wrong.example)") {
		t.Fatalf("a wrong server name: exit %d, %v; want 1 naming the server name", jobcli.ExitCode(r.err), r.err)
	}
	r = vmafx(ci, "get", first.ID, "--timeout", "0s")
	if jobcli.ExitCode(r.err) != 1 || !strings.Contains(r.err.Error(), "--timeout 0s") {
		t.Fatalf("--timeout 0s: exit %d, %v; want a usage error", jobcli.ExitCode(r.err), r.err)
	}
	// A command interrupted (Ctrl-C) exits 130.
	interrupted, cancel := context.WithCancel(context.Background())
	cancel()
	if r := execute(interrupted, t, "", time.Time{}, "vmafx", "--config", ci, "get", first.ID); jobcli.ExitCode(r.err) != jobcli.ExitInterrupted {
		t.Fatalf("an interrupted call: exit %d, %v; want %d", jobcli.ExitCode(r.err), r.err, jobcli.ExitInterrupted)
	}

	// A node measures; watch follows the first job to its end.
	stop, err := w.RunNode("node-a1")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r = vmafx(ci, "watch", first.ID, "--interval", "100ms", "-o", "json")
	done := jobOf(t, r)
	if done.State != "JOB_STATE_SUCCEEDED" || len(done.Scores) != 2 || done.Scores[0].Mean < 20 {
		t.Fatalf("watched: %+v", done)
	}
	// Not a terminal: a plain line per change.
	if !strings.Contains(r.stderr.String(), "SUCCEEDED node-a1 10 frames") {
		t.Fatalf("watch lines:\n%s", r.stderr.String())
	}
	if r := vmafx(ci, "watch", cancelled.ID, "--interval", "100ms"); jobcli.ExitCode(r.err) != jobcli.ExitJobFailed || !strings.Contains(r.err.Error(), "ended CANCELLED") {
		t.Fatalf("watching a cancelled job: exit %d, %v", jobcli.ExitCode(r.err), r.err)
	}
	if r := vmafx(ci, "watch", third.ID, "--interval", "100ms"); r.err != nil || !strings.Contains(r.stdout.String(), "SUCCEEDED") || !strings.Contains(r.stdout.String(), "psnr=") {
		t.Fatalf("watch as a table: %v\n%s", r.err, r.stdout.String())
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestVmafxClip: the two clips, the same bytes for the same seed, and the
// bounds refused.
func TestVmafxClip(t *testing.T) {
	dir := t.TempDir()
	r := execute(context.Background(), t, "", time.Time{}, "vmafx", "clip", "--out-dir", dir, "--width", "16", "--height", "8", "--frames", "3", "--noise", "4")
	if r.err != nil {
		t.Fatal(r.err)
	}
	frame := 16*8 + 2*8*4
	for _, name := range []string{"reference.y4m", "distorted.y4m"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "YUV4MPEG2 W16 H8 ") || len(b) != len("YUV4MPEG2 W16 H8 F25:1 Ip A1:1 C420jpeg\n")+3*(len("FRAME\n")+frame) {
			t.Fatalf("%s: %d bytes", name, len(b))
		}
	}
	for _, args := range [][]string{{"--width", "1"}, {"--frames", "0"}, {"--noise", "300"}, {"--width", "5000"}} {
		if r := execute(context.Background(), t, "", time.Time{}, append([]string{"vmafx", "clip", "--out-dir", dir}, args...)...); r.err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
