package demo

// The pdp's decision log (docs/decision-log.md): a decision kept, proved
// in the signed log with golang.org/x/mod's verifier, and an entry altered
// in the store caught.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/devissuer"
	secretsengine "github.com/callerauth/callerauth/examples/secrets-engine"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
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
	var dbFile string
	s, url, stop, err := e.servePDP("pdp-log", secretsengine.WriteTo, callers.ModeEnforce, "secrets-engine="+sePrincipal, func(dir string, o *pdp.Options) error {
		keyFile := filepath.Join(dir, "decisions.key")
		dbFile = filepath.Join(dir, "decisions.db")
		o.DecisionLog.Datastore, o.DecisionLog.KeyFile = dbFile, keyFile
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
	// Someone with the database alters the decision.
	db, err := datastore.Open(ctx, "translog", dbFile, translog.Migrations, datastore.Options{})
	if err != nil {
		return fail(r, err)
	}
	defer db.Close()
	var entry map[string]any
	if err := json.Unmarshal(proved.Entry, &entry); err != nil {
		return fail(r, err)
	}
	entry["caller"] = "system:serviceaccount:secrets-engine:someone-else"
	forged, _ := json.Marshal(entry)
	if _, err := db.ExecContext(ctx, "UPDATE translog_entries SET data = ? WHERE idx = 0", forged); err != nil {
		return fail(r, err)
	}
	var again decisionlog.Proved
	if err := get(fmt.Sprintf("%s0?size=%d", decisionlog.PathEntry, size), &again); err != nil {
		return fail(r, err)
	}
	altered := tlog.CheckRecord(proof, size, root, 0, tlog.RecordHash(again.Entry))
	r.Observed = fmt.Sprintf("decision 0 of %d proved against the signed checkpoint; altered in the store: %v", size, altered)
	r.Pass = altered != nil
	return r
}
