package demo

// The pdp's decision log (docs/decision-log.md): a decision kept, proved
// in the signed log with golang.org/x/mod's verifier, and an entry altered
// on disk caught.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/devissuer"
	secretsengine "github.com/callerauth/callerauth/examples/secrets-engine"
	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

const logOrigin = "pdp.demo.callerauth/decisions"

func pdpDecisionLog(ctx context.Context, e *env) Result {
	r := Result{Scenario: "pdp decision log: a check kept, proved, and an altered entry", Expected: "in the signed log (x/mod tlog proof); altered: proof fails"}
	skey, vkey, err := note.GenerateKey(rand.Reader, logOrigin)
	if err != nil {
		return fail(r, err)
	}
	var logDir string
	s, url, stop, err := e.servePDP("pdp-log", secretsengine.WriteTo, callers.ModeEnforce, "secrets-engine="+sePrincipal, func(dir string, o *pdp.Options) error {
		keyFile := filepath.Join(dir, "decisions.key")
		logDir = filepath.Join(dir, "decisions")
		o.DecisionLog.Dir, o.DecisionLog.KeyFile = logDir, keyFile
		o.CallerBindings = append(o.CallerBindings, decisionlog.ReaderSystem+"=system:serviceaccount:audit:auditor")
		return os.WriteFile(keyFile, []byte(skey+"\n"), 0o600)
	})
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	logCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = s.DecisionLog().Start(logCtx); close(done) }()
	defer func() { cancel(); <-done }()

	toks, err := e.seTokens()
	if err != nil {
		return fail(r, err)
	}
	p := &pdpEnv{url: url}
	code, body, err := p.check(ctx, toks["positive"])
	if err != nil {
		return fail(r, err)
	}
	if code != http.StatusOK {
		return fail(r, fmt.Errorf("the check: %d %.200s", code, body))
	}
	auditor, err := e.iss.Mint(devissuer.TokenRequest{Namespace: "audit", ServiceAccount: "auditor", Audiences: []string{pdp.DefaultAudience}, Lifetime: 10 * time.Minute})
	if err != nil {
		return fail(r, err)
	}
	get := func(path string, v any) error {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
			req.Header.Set("Authorization", "Bearer "+auditor.Token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return json.Unmarshal(b, v)
			}
			if time.Now().After(deadline) { // the first checkpoint is signed within a second
				return fmt.Errorf("GET %s: %d %.200s", path, resp.StatusCode, b)
			}
		}
	}
	var proved decisionlog.Proved
	if err := get(decisionlog.PathEntry+"0", &proved); err != nil {
		return fail(r, err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return fail(r, err)
	}
	n, err := note.Open([]byte(proved.Checkpoint), note.VerifierList(v))
	if err != nil {
		return fail(r, fmt.Errorf("the checkpoint: %w", err))
	}
	_, size, root, err := translog.ParseCheckpoint(n.Text)
	if err != nil {
		return fail(r, err)
	}
	proof := make(tlog.RecordProof, len(proved.Proof))
	for i, h := range proved.Proof {
		if proof[i], err = tlog.ParseHash(h); err != nil {
			return fail(r, err)
		}
	}
	if err := tlog.CheckRecord(proof, size, root, 0, tlog.RecordHash(proved.Entry)); err != nil {
		return fail(r, fmt.Errorf("the inclusion proof: %w", err))
	}
	// Someone with the log's directory alters the decision, checksum and
	// all, while the log is stopped: the log no longer opens.
	cancel()
	<-done
	forged := bytes.Replace(proved.Entry, []byte(sePrincipal), []byte(sePrincipal[:len(sePrincipal)-1]+"X"), 1)
	if err := translog.Forge(logDir, logOrigin, 0, forged); err != nil {
		return fail(r, err)
	}
	_, altered := translog.Open(translog.Config{Dir: logDir, Key: skey, Metrics: "demo"})
	r.Observed = fmt.Sprintf("decision 0 of %d proved against the signed checkpoint; altered on disk: %v", size, altered)
	r.Pass = altered != nil && strings.Contains(altered.Error(), "does not extend its checkpoint")
	return r
}
