package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	secretsengine "github.com/callerauth/callerauth/examples/secrets-engine"
	"github.com/callerauth/callerauth/internal/kit/tlogtools"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// TestDecisionsCommands: keygen, then search, show and verify against a
// pdp keeping its decision log, over HTTPS with an auditor's token file.
func TestDecisionsCommands(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "decisions.key")
	r := execute(ctx, t, "", time.Time{}, "decisions", "checkpoint-key", "--origin", "pdp.test/decisions", "--out", keyFile)
	if r.err != nil {
		t.Fatal(r.err)
	}
	_, vkey, ok := strings.Cut(r.stdout.String(), "verifier key: ")
	vkey = strings.TrimSpace(vkey)
	if !ok || !strings.HasPrefix(vkey, "pdp.test/decisions+") {
		t.Fatalf("checkpoint-key printed %q", r.stdout.String())
	}
	if r := execute(ctx, t, "", time.Time{}, "decisions", "checkpoint-key", "--origin", "pdp.test/decisions", "--out", keyFile); r.err == nil {
		t.Error("checkpoint-key overwrote a key")
	}
	// A replica's verifier key checks what that replica signs.
	skey, _ := os.ReadFile(keyFile)
	rk := execute(ctx, t, "", time.Time{}, "decisions", "replica-key", "--verifier-key", vkey, "--replica", "pdp-0")
	if rk.err != nil {
		t.Fatalf("replica-key: %v", rk.err)
	}
	replicaOpts := decisionlog.NewOptions()
	replicaOpts.Dir, replicaOpts.KeyFile, replicaOpts.Replica = filepath.Join(dir, "replica"), keyFile, "pdp-0"
	rc, err := replicaOpts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	rsigner, err := note.NewSigner(rc.Key)
	if err != nil {
		t.Fatal(err)
	}
	rverifier, err := note.NewVerifier(strings.TrimSpace(rk.stdout.String()))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := note.Sign(&note.Note{Text: "pdp.test/decisions/pdp-0\n1\nAAAA\n"}, rsigner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(signed, note.VerifierList(rverifier)); err != nil || rc.Origin != "pdp.test/decisions/pdp-0" || len(skey) == 0 {
		t.Errorf("replica pdp-0's checkpoint does not verify with its replica-key (%s): %v", rc.Origin, err)
	}

	a := startAudited(ctx, t, dir, keyFile, nil)
	cli, check, tamper := a.cli, a.check, a.tamper
	// The first checkpoint is signed within a second.
	var r2 *run
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r2 = cli("show", "0", "--verifier-key", vkey); r2.err == nil || time.Now().After(deadline) {
			break
		}
	}
	if r2.err != nil || !strings.Contains(r2.stdout.String(), "verified: decision 0 is in the log pdp.test/decisions of 1 decisions") {
		t.Fatalf("show 0: %v\n%s", r2.err, r2.stdout.String())
	}
	r = cli("search", "--caller", "system:serviceaccount:secrets-engine:secrets-engine", "-o", "json")
	var got decisionlog.Stored
	if r.err != nil || json.Unmarshal(r.stdout.Bytes(), &got) != nil || got.Index != 0 {
		t.Fatalf("search: %v\n%s", r.err, r.stdout.String())
	}
	if r := cli("search", "--decision", "allowed"); r.err != nil || !strings.Contains(r.stdout.String(), "secrets-engine") || !strings.Contains(r.stdout.String(), "INDEX") {
		t.Errorf("search as a table: %v\n%s", r.err, r.stdout.String())
	}

	kept := filepath.Join(dir, "checkpoint-1")
	if r := cli("verify", "--verifier-key", vkey, "--save", kept); r.err != nil || !strings.Contains(r.stdout.String(), "holds 1 decisions") {
		t.Fatalf("verify: %v\n%s", r.err, r.stdout.String())
	}
	check()
	var r3 *run
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r3 = cli("verify", "--verifier-key", vkey, "--since", kept); strings.Contains(r3.stdout.String(), "holds 2 decisions") || time.Now().After(deadline) {
			break
		}
	}
	if r3.err != nil || !strings.Contains(r3.stdout.String(), "extends the log of 1") {
		t.Fatalf("verify --since: %v\n%s", r3.err, r3.stdout.String())
	}
	_, other, _ := strings.Cut(strings.TrimSpace(execute(ctx, t, "", time.Time{}, "decisions", "checkpoint-key", "--origin", "pdp.test/decisions", "--out", filepath.Join(dir, "other.key")).stdout.String()), "verifier key: ")
	if r := cli("show", "0", "--verifier-key", other); r.err == nil {
		t.Error("show accepted a checkpoint with another log's key")
	}
	// Served altered: show refuses it.
	tamper.Store(true)
	if r := cli("show", "0", "--verifier-key", vkey); r.err == nil || !strings.Contains(r.err.Error(), "NOT proved") {
		t.Errorf("show of an altered decision: %v\n%s", r.err, r.stdout.String())
	}
}

// audited is a pdp keeping its decision log, served over HTTPS, and the
// decisions commands pointed at it with an auditor's token.
type audited struct {
	s      *pdp.Server
	srv    *httptest.Server
	tamper *atomic.Bool
	// check makes one allowed decision.
	check func()
	// cli runs a decisions command against the pdp.
	cli func(args ...string) *run
	// token is the auditor's bearer token; caFile the server's
	// certificate.
	token, caFile string
}

// startAudited starts a pdp whose log is signed by keyFile, with
// configure's settings on top.
func startAudited(ctx context.Context, t *testing.T, dir, keyFile string, configure func(*pdp.Options)) *audited {
	t.Helper()
	a := &audited{tamper: &atomic.Bool{}}
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	policyDir, registry, err := secretsengine.WriteTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	signing := filepath.Join(dir, "signing.pem")
	if err := decision.GenerateKeyFile(signing); err != nil {
		t.Fatal(err)
	}
	o := pdp.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput, o.InsecureHTTP = "127.0.0.1:0", "", io.Discard, true
	o.PolicyDir, o.Registry, o.SigningKeyFile, o.Callers.Kubeconfig = policyDir, registry, signing, iss.KubeconfigFile()
	o.CallerBindings = []string{"secrets-engine=system:serviceaccount:secrets-engine:secrets-engine", decisionlog.ReaderSystem + "=system:serviceaccount:audit:auditor"}
	o.DecisionLog.Dir, o.DecisionLog.KeyFile = filepath.Join(dir, "decisions"), keyFile
	if configure != nil {
		configure(&o)
	}
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	s, err := pdp.New(c)
	if err != nil {
		t.Fatal(err)
	}
	// tamper, once set, alters every decision the pdp serves, as a
	// server (or a man in the middle) with something to hide would: the
	// caller's name, kept the same length so that the entry bundles an
	// auditor reads keep their framing.
	tamper := a.tamper
	h := s.Handler()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tamper.Load() {
			h.ServeHTTP(w, r)
			return
		}
		r.Header.Del("Accept-Encoding") // entry bundles too, uncompressed
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		_, _ = w.Write(bytes.ReplaceAll(rec.Body.Bytes(), []byte("secrets-engine:secrets-engine"), []byte("secrets-engine:secrets-impost")))
	}))
	t.Cleanup(srv.Close)
	logCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = s.DecisionLog().Start(logCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	mint := func(ns, sa string) string {
		tok, err := iss.Mint(devissuer.TokenRequest{Namespace: ns, ServiceAccount: sa, Audiences: []string{pdp.DefaultAudience}, Lifetime: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	a.check = func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/check", bytes.NewReader(secretsengine.AllowRequest()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+mint("secrets-engine", "secrets-engine"))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the check: %d", resp.StatusCode)
		}
	}
	a.check()

	caFile, tokenFile, cfgFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "auditor.token"), filepath.Join(dir, "audit.yaml")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	a.token = mint("audit", "auditor")
	if err := os.WriteFile(tokenFile, []byte(a.token), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "decisions:\n  address: " + strings.TrimPrefix(srv.URL, "https://") + "\n  tls: true\n  ca_file: " + caFile + "\n  token_file: " + tokenFile + "\n"
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a.cli = func(args ...string) *run {
		t.Helper()
		return execute(ctx, t, "", time.Time{}, append([]string{"decisions", "--config", cfgFile}, args...)...)
	}
	a.s, a.srv, a.caFile = s, srv, caFile
	return a
}

// TestWitnessedDecisions: a pdp's log witnessed by two witnesses that
// are not ours (transparency-dev/witness's omniwitness): verify asks for
// k of n cosignatures and refuses more than there are; proof writes a
// C2SP tlog-proof that tlogproofcheck (transparency-dev/formats and
// merkle) accepts offline, and refuses once altered; tessera's fsck
// audits the served tiles and refuses them once an entry is altered.
func TestWitnessedDecisions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "decisions.key")
	r := execute(ctx, t, "", time.Time{}, "decisions", "checkpoint-key", "--origin", "pdp.test/witnessed", "--out", keyFile)
	_, vkey, _ := strings.Cut(r.stdout.String(), "verifier key: ")
	vkey = strings.TrimSpace(vkey)
	if r.err != nil || vkey == "" {
		t.Fatalf("keygen: %v", r.err)
	}
	var policy strings.Builder
	var witnessKeys []string
	for _, name := range []string{"w1", "w2"} {
		wdir := filepath.Join(dir, name)
		if err := os.Mkdir(wdir, 0o700); err != nil {
			t.Fatal(err)
		}
		w, err := tlogtools.StartWitness(ctx, wdir, vkey)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		witnessKeys = append(witnessKeys, w.Key)
		fmt.Fprintf(&policy, "witness %s %s\n", w.Key, w.URL)
	}
	policyFile := filepath.Join(dir, "witnesses")
	if err := os.WriteFile(policyFile, []byte(policy.String()+"quorum 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAudited(ctx, t, dir, keyFile, func(o *pdp.Options) { o.DecisionLog.WitnessesFile = policyFile })
	for range 20 {
		a.check()
	}
	var v *run
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if v = a.cli("verify", "--verifier-key", vkey, "--witnesses", policyFile); strings.Contains(v.stdout.String(), "holds 21 decisions") || time.Now().After(deadline) {
			break
		}
	}
	if v.err != nil || !strings.Contains(v.stdout.String(), "cosigned by 2 of 2 witnesses") {
		t.Fatalf("verify --witnesses: %v\n%s", v.err, v.stdout.String())
	}
	// A policy asking for a witness that never saw the log: refused.
	_, stranger, _ := strings.Cut(strings.TrimSpace(execute(ctx, t, "", time.Time{}, "decisions", "checkpoint-key", "--origin", "witness.test/stranger", "--out", filepath.Join(dir, "stranger.key")).stdout.String()), "verifier key: ")
	strict := filepath.Join(dir, "strict")
	if err := os.WriteFile(strict, []byte(policy.String()+"witness "+stranger+"\nquorum 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.cli("verify", "--verifier-key", vkey, "--witnesses", strict); r.err == nil || !strings.Contains(r.err.Error(), "2 of the 3 witness cosignatures") {
		t.Errorf("verify with a quorum of 3: %v\n%s", r.err, r.stdout.String())
	}
	if r := a.cli("verify", "--verifier-key", vkey, "--witnesses", strict, "--quorum", "2"); r.err != nil {
		t.Errorf("verify --quorum 2 of 3: %v", r.err)
	}

	// One decision's proof, checked offline by a verifier not ours.
	proofFile := filepath.Join(dir, "7.tlog-proof")
	if r := a.cli("proof", "7", "--verifier-key", vkey, "--witnesses", policyFile, "--out", proofFile); r.err != nil {
		t.Fatalf("proof: %v", r.err)
	}
	out, err := tlogtools.CheckProof(ctx, proofFile, vkey, 2, witnessKeys...)
	if err != nil || !strings.Contains(out, "entry 7") {
		t.Fatalf("tlogproofcheck refused our proof: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(proofFile)
	lines := strings.SplitN(string(b), "\n", 3)
	entry, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[1], "extra "))
	forged := bytes.Replace(entry, []byte("secrets-engine:secrets-engine"), []byte("secrets-engine:secrets-impost"), 1)
	if bytes.Equal(forged, entry) {
		t.Fatalf("entry 7 does not name its caller: %s", entry)
	}
	altered := filepath.Join(dir, "altered.tlog-proof")
	if err := os.WriteFile(altered, []byte(lines[0]+"\nextra "+base64.StdEncoding.EncodeToString(forged)+"\n"+lines[2]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := tlogtools.CheckProof(ctx, altered, vkey, 2, witnessKeys...); err == nil || !strings.Contains(out, "refused") {
		t.Errorf("tlogproofcheck accepted an altered entry:\n%s", out)
	}
	if out, err := tlogtools.CheckProof(ctx, proofFile, vkey, 3, append(witnessKeys, stranger)...); err == nil {
		t.Errorf("tlogproofcheck accepted 2 cosignatures for a quorum of 3:\n%s", out)
	}

	// The served tiles, audited by tessera's fsck; then served altered.
	tiles := a.srv.URL + decisionlog.PathTiles
	if out, err := tlogtools.Fsck(ctx, dir, tiles, vkey, a.token, a.caFile); err != nil {
		t.Fatalf("fsck of the served log: %v\n%s", err, out)
	}
	a.tamper.Store(true)
	if out, err := tlogtools.Fsck(ctx, dir, tiles, vkey, a.token, a.caFile); err == nil || !strings.Contains(out, "fsck failed") {
		t.Errorf("fsck accepted a log served altered:\n%s", out)
	}
}
