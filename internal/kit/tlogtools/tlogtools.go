// Package tlogtools runs the transparency-log tools that are not ours
// against a log of ours: transparency-dev/witness's omniwitness (a C2SP
// tlog-witness, on loopback), tessera v1.0.4's cmd/fsck (an auditor of
// any C2SP tlog-tiles URL) and tlogproofcheck (transparency-dev/formats
// and merkle checking a C2SP tlog-proof). `make tlog-tools`
// (test/tools/tlog) builds them; they are found through
// $CALLERAUTH_TLOG_BIN.
package tlogtools

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/proc"
)

// Bin is the path of one of the tools: omniwitness, fsck or
// tlogproofcheck.
func Bin(name string) (string, error) {
	dir := os.Getenv("CALLERAUTH_TLOG_BIN")
	if dir == "" {
		return "", errors.New("tlogtools: $CALLERAUTH_TLOG_BIN is not set: run the test through make test, or make tlog-tools and set it to the directory it built")
	}
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil { //nolint:gosec // the harness's own cache path
		return "", fmt.Errorf("tlogtools: %s is missing: run make tlog-tools (make test does): %w", bin, err)
	}
	return bin, nil
}

// Witness is a running omniwitness.
type Witness struct {
	// URL is its submission prefix (http, loopback).
	URL string
	// Key is its verifier key (Ed25519, type 0x01, as its own key tool
	// prints it).
	Key  string
	bin  string
	args []string
	dir  string
	proc *proc.Process
}

// StartWitness runs a witness in dir that knows the logs of the given
// verifier keys (origin: the key's name), keeping its state in dir (so
// that Restart keeps what it cosigned).
func StartWitness(ctx context.Context, dir string, logKeys ...string) (*Witness, error) {
	bin, err := Bin("omniwitness")
	if err != nil {
		return nil, err
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "witness.test/"+filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	keyFile, logsFile := filepath.Join(dir, "witness.key"), filepath.Join(dir, "logs.yaml")
	var logs strings.Builder
	logs.WriteString("Logs:\n")
	for _, k := range logKeys {
		fmt.Fprintf(&logs, "  - Origin: %s\n    PublicKey: %s\n    URL: http://127.0.0.1/unused\n", strings.SplitN(k, "+", 2)[0], k)
	}
	if err := os.WriteFile(keyFile, []byte(skey), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(logsFile, []byte(logs.String()), 0o600); err != nil {
		return nil, err
	}
	addr, err := loopback.Addr()
	if err != nil {
		return nil, err
	}
	w := &Witness{URL: "http://" + addr, Key: vkey, bin: bin, dir: dir,
		args: []string{"--listen", addr, "--metrics_listen", "", "--private_key_path", keyFile, "--additional_logs", logsFile,
			"--db_file", filepath.Join(dir, "witness.db"), "--logtostderr"}}
	return w, w.start(ctx)
}

func (w *Witness) start(ctx context.Context) error {
	p, err := proc.Start(proc.Spec{Bin: w.bin, Args: w.args, Dir: w.dir})
	if err != nil {
		return fmt.Errorf("omniwitness: %w", err)
	}
	w.proc = p
	c := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// Any answer (405 to a GET) says it listens.
		resp, err := c.Get(w.URL + "/add-checkpoint")
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = p.Stop()
			return fmt.Errorf("omniwitness did not answer in 60 s: %w\n%s", err, p.Output())
		}
	}
}

// Stop ends it.
func (w *Witness) Stop() { _ = w.proc.Stop() }

// Restart stops it and starts it again at the same address, with what
// it cosigned kept.
func (w *Witness) Restart(ctx context.Context) error {
	w.Stop()
	return w.start(ctx)
}

// Output is what it printed.
func (w *Witness) Output() string { return w.proc.Output() }

// Fsck runs tessera's cmd/fsck against a tlog-tiles URL (ending in /)
// with the log's verifier key, a bearer token ("" for none) and the CA
// file the server's certificate is checked against ("": the system's); it
// returns what fsck printed, and an error unless fsck printed that it
// succeeded ("Successfully fsck'd log") (fsck v1.0.4 exits 0 even when it prints "fsck
// failed": what it prints decides).
func Fsck(ctx context.Context, dir, url, vkey, bearer, caFile string) (string, error) {
	bin, err := Bin("fsck")
	if err != nil {
		return "", err
	}
	keyFile := filepath.Join(dir, "fsck.vkey")
	if err := os.WriteFile(keyFile, []byte(vkey), 0o600); err != nil {
		return "", err
	}
	args := []string{"--storage_url", url, "--public_key", keyFile, "--origin", strings.SplitN(vkey, "+", 2)[0], "-N", "4", "--ui=false", "--logtostderr"}
	if bearer != "" {
		args = append(args, "--bearer_token", bearer)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // our own tool build
	if caFile != "" {
		cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+caFile)
	}
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		return string(out), fmt.Errorf("fsck: %w", err)
	case strings.Contains(string(out), "fsck failed"):
		return string(out), errors.New("fsck failed")
	case !strings.Contains(string(out), "Successfully fsck'd log"):
		return string(out), errors.New("fsck did not say it succeeded")
	}
	return string(out), nil
}

// CheckProof runs tlogproofcheck on a tlog-proof file: nil when it
// accepts it, with the log's key, the witnesses' keys and the quorum.
func CheckProof(ctx context.Context, file, logKey string, quorum int, witnessKeys ...string) (string, error) {
	bin, err := Bin("tlogproofcheck")
	if err != nil {
		return "", err
	}
	args := []string{"--log-key", logKey, "--quorum", fmt.Sprint(quorum)}
	for _, k := range witnessKeys {
		args = append(args, "--witness-key", k)
	}
	out, err := exec.CommandContext(ctx, bin, append(args, file)...).CombinedOutput() //nolint:gosec // our own tool build
	return string(out), err
}
