package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

const auditor = "system:serviceaccount:audit:auditor"

// logged is an entry of the log, as docs/decision-log.md states it.
type logged struct {
	Service string `json:"service"`
	Caller  string `json:"caller"`
	System  string `json:"system"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	Method  string `json:"method"`
	Path    string `json:"path"`
	Status  int    `json:"status"`
}

// withLog is the proxy's options with a decision log in an SQLite file,
// its read API on a loopback port of its own, the auditor bound to read
// it; it returns the checkpoints' verifier key.
func withLog(t *testing.T, o *proxy.Options) string {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "proxy.test.example/decisions")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "log.key")
	if err := os.WriteFile(keyFile, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o.DecisionLogListen, err = loopback.Addr(); err != nil {
		t.Fatal(err)
	}
	o.DecisionLog.Dir, o.DecisionLog.KeyFile = filepath.Join(dir, "decisions"), keyFile
	o.CallerBindings = append(o.CallerBindings, decisionlog.ReaderSystem+"="+auditor)
	return vkey
}

func (e *env) mint(t *testing.T, ns, sa string) string {
	t.Helper()
	tok, err := e.iss.Mint(devissuer.TokenRequest{Namespace: ns, ServiceAccount: sa, Audiences: []string{audience}})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// decisions asks the read API until it holds want decisions for query.
func (e *env) decisions(t *testing.T, base, token, query string, want int) []logged {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := e.get(t, base+decisionlog.PathSearch+"?"+query, token)
		if code != http.StatusOK {
			t.Fatalf("GET %s?%s: %d %s", decisionlog.PathSearch, query, code, body)
		}
		var p decisionlog.Page
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Decisions) >= want || time.Now().After(deadline) {
			out := make([]logged, len(p.Decisions))
			for i, d := range p.Decisions {
				if err := json.Unmarshal(d.Entry, &out[i]); err != nil {
					t.Fatal(err)
				}
			}
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDecisionLog: every verdict the proxy gives is in its log — the
// request passed on, the caller refused, the request without a token —
// read on the log's own listener by the bound reader alone, its
// inclusion proven with x/mod's tlog; under audit a violation let
// through is kept as allowed, with its reason.
func TestDecisionLog(t *testing.T) {
	for _, mode := range []string{"enforce", "audit"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			var reached atomic.Int64
			up := httptest.NewServer(echoUpstream(&reached))
			t.Cleanup(up.Close)
			o := e.options(t, up.URL)
			o.Callers.Mode = mode
			vkey := withLog(t, &o)
			_, addr := run(t, o)
			base, logBase := "https://"+addr, "https://"+o.DecisionLogListen
			reader := e.mint(t, "audit", "auditor")

			if code, body := e.get(t, base+"/hello", e.tokens["client"]); code != http.StatusOK {
				t.Fatalf("the allowed caller: %d %s", code, body)
			}
			code, body := e.get(t, base+"/secret", e.tokens["intruder"])
			if want := map[string]int{"enforce": http.StatusForbidden, "audit": http.StatusOK}[mode]; code != want {
				t.Fatalf("the caller not allowed: %d %s, want %d", code, body, want)
			}
			if code, body := e.get(t, base+"/anon", ""); code != map[string]int{"enforce": http.StatusUnauthorized, "audit": http.StatusOK}[mode] {
				t.Fatalf("no token: %d %s", code, body)
			}

			got := e.decisions(t, logBase, reader, "", 3)
			if len(got) != 3 {
				t.Fatalf("the log holds %d decisions, want 3: %+v", len(got), got)
			}
			byPath := map[string]logged{}
			for _, d := range got {
				if d.Service != "proxy" || d.Method != http.MethodGet {
					t.Errorf("an entry of service %q, method %q", d.Service, d.Method)
				}
				byPath[d.Path] = d
			}
			if d := byPath["/hello"]; !d.Allowed || d.Caller != "system:serviceaccount:demo:client" || d.Reason != "" || d.Status != 0 {
				t.Errorf("the request passed on: %+v", d)
			}
			intruder := byPath["/secret"]
			if intruder.Caller != "system:serviceaccount:demo:intruder" || intruder.Reason != proxy.ReasonNotAllowed.String() {
				t.Errorf("the caller not allowed: %+v", intruder)
			}
			if mode == "enforce" && (intruder.Allowed || intruder.Status != http.StatusForbidden) {
				t.Errorf("a refusal kept as %+v", intruder)
			}
			if mode == "audit" && (!intruder.Allowed || intruder.Status != 0) {
				t.Errorf("a violation let through under audit kept as %+v", intruder)
			}
			anon := byPath["/anon"]
			if anon.Caller != "" || anon.Reason != "token_missing" || anon.Allowed != (mode == "audit") || anon.Status != map[string]int{"enforce": http.StatusUnauthorized, "audit": 0}[mode] {
				t.Errorf("the request without a token: %+v", anon)
			}
			if refused := e.decisions(t, logBase, reader, "caller=system:serviceaccount:demo:intruder", 1); len(refused) != 1 {
				t.Errorf("a search by caller found %d", len(refused))
			}

			// The reader alone reads it, under audit too; the reader is no
			// caller of the upstream, and the upstream never serves the log.
			for name, tok := range map[string]string{"the allowed caller": e.tokens["client"], "the intruder": e.tokens["intruder"], "no token": ""} {
				if code, body := e.get(t, logBase+decisionlog.PathSearch, tok); code != http.StatusForbidden && code != http.StatusUnauthorized {
					t.Errorf("%s reads the log: %d %s", name, code, body)
				}
			}
			before := reached.Load()
			if code, _ := e.get(t, base+decisionlog.PathSearch, reader); mode == "enforce" && code != http.StatusForbidden {
				t.Errorf("the reader through the proxy's listener: %d, want 403 (not a caller the proxy lets through)", code)
			}
			if mode == "enforce" && reached.Load() != before {
				t.Error("the reader's request reached the upstream")
			}

			// Inclusion of the request passed on, with x/mod's own code.
			var index int64 = -1
			for i, d := range got {
				if d.Path == "/hello" {
					index = int64(i)
				}
			}
			verifyInclusion(t, e, logBase, reader, vkey, index)
		})
	}
}

// verifyInclusion fetches a decision with its proof and checks it with
// golang.org/x/mod's tlog and note.
func verifyInclusion(t *testing.T, e *env, base, token, vkey string, index int64) {
	t.Helper()
	var p decisionlog.Proved
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := e.get(t, fmt.Sprintf("%s%s%d", base, decisionlog.PathEntry, index), token)
		if code == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &p); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decision %d: %d %s", index, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open([]byte(p.Checkpoint), note.VerifierList(v))
	if err != nil {
		t.Fatalf("the checkpoint: %v", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	var size int64
	var root tlog.Hash
	if _, err := fmt.Sscan(lines[1], &size); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil {
		t.Fatal(err)
	}
	copy(root[:], b)
	proof := make(tlog.RecordProof, len(p.Proof))
	for i, h := range p.Proof {
		b, err := base64.StdEncoding.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		copy(proof[i][:], b)
	}
	if err := tlog.CheckRecord(proof, size, root, p.Index, tlog.RecordHash(p.Entry)); err != nil {
		t.Fatalf("decision %d is not proven in the tree of %d: %v", p.Index, size, err)
	}
}

// TestDecisionLogRequired: under required, a verdict the log cannot keep
// is refused 503 decision_log_unavailable and the upstream never sees
// the request; a refusal is answered as ever.
func TestDecisionLogRequired(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	up := httptest.NewServer(echoUpstream(&reached))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	withLog(t, &o)
	s, addr := run(t, o)
	base := "https://" + addr
	if code, body := e.get(t, base+"/hello", e.tokens["client"]); code != http.StatusOK {
		t.Fatalf("the allowed caller: %d %s", code, body)
	}
	// The volume of the log's segment fills: its next write fails.
	if _, err := faults.DiskFull(filepath.Join(s.DecisionLog().Translog().Dir(), "segments")); err != nil {
		t.Fatal(err)
	}
	before := reached.Load()
	code, body := e.get(t, base+"/hello", e.tokens["client"])
	if code != http.StatusServiceUnavailable || !strings.Contains(body, decisionlog.ReasonUnavailable.String()) {
		t.Fatalf("a request whose verdict the log cannot keep: %d %s", code, body)
	}
	if reached.Load() != before {
		t.Error("the upstream saw a request the log did not keep")
	}
	if code, _ := e.get(t, base+"/hello", e.tokens["intruder"]); code != http.StatusForbidden {
		t.Errorf("a refusal with the log down: %d, want 403", code)
	}
	if err := s.DecisionLog().Check(context.Background()); err == nil {
		t.Error("the log is ready with its disk full")
	}
}

// TestDecisionLogOptions: what cannot be honoured stops the proxy at
// start-up, naming the flag.
func TestDecisionLogOptions(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name string
		edit func(*proxy.Options)
		want string
	}{
		{"a reader without a log", func(o *proxy.Options) {
			o.CallerBindings = []string{decisionlog.ReaderSystem + "=" + auditor}
		}, "give --decision-log"},
		{"a listener without a log", func(o *proxy.Options) { o.DecisionLogListen = "127.0.0.1:0" }, "give --decision-log"},
		{"a reader and no listener", func(o *proxy.Options) { withLog(t, o); o.DecisionLogListen = "" }, "give --decision-log-listen"},
		{"a bad listener", func(o *proxy.Options) { withLog(t, o); o.DecisionLogListen = "nowhere" }, "--decision-log-listen"},
		{"a log without a key", func(o *proxy.Options) { withLog(t, o); o.DecisionLog.KeyFile = "" }, "--decision-log-key-file"},
		{"the reader binding alone lets no caller through", func(o *proxy.Options) { withLog(t, o); o.AllowServiceAccounts = nil }, "name the callers let through"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := e.options(t, "http://127.0.0.1:1")
			c.edit(&o)
			if _, err := o.Complete(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %q", err, c.want)
			}
		})
	}
}
