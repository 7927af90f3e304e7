package pdp_test

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
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

const (
	logOrigin = "pdp.test.example/decisions"
	auditor   = "system:serviceaccount:audit:auditor"
	engine    = "system:serviceaccount:secrets-engine:secrets-engine"
)

// withLog starts a pdp keeping a decision log in a directory, the
// auditor bound to read it, and runs the log; it returns the
// checkpoints' verifier key and the log's directory.
func withLog(t *testing.T, mode string, edit func(*pdp.Options)) (*env, string, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, logOrigin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile, logDir := filepath.Join(dir, "log.key"), filepath.Join(dir, "decisions")
	if err := os.WriteFile(keyFile, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := start(t, mode, func(o *pdp.Options) {
		o.DecisionLog.Dir, o.DecisionLog.KeyFile = logDir, keyFile
		o.CallerBindings = append(o.CallerBindings, decisionlog.ReaderSystem+"="+auditor)
		if edit != nil {
			edit(o)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.srv.DecisionLog().Start(ctx); close(done) }()
	var once sync.Once
	e.stopLog = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(e.stopLog)
	return e, vkey, logDir
}

func (e *env) tokenFor(t *testing.T, ns, sa string) string {
	t.Helper()
	tok, err := e.iss.Mint(devissuer.TokenRequest{Namespace: ns, ServiceAccount: sa, Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

func (e *env) get(t *testing.T, token, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type logged struct {
	Service string          `json:"service"`
	Caller  string          `json:"caller"`
	System  string          `json:"system"`
	Allowed bool            `json:"allowed"`
	Reason  string          `json:"reason"`
	Path    string          `json:"path"`
	Status  int             `json:"status"`
	Answer  json.RawMessage `json:"answer"`
}

// search asks the read API until it holds want decisions for query.
func (e *env) search(t *testing.T, token, query string, want int) decisionlog.Page {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := e.get(t, token, decisionlog.PathSearch+"?"+query)
		if code != http.StatusOK {
			t.Fatalf("GET %s?%s: %d %s", decisionlog.PathSearch, query, code, body)
		}
		var p decisionlog.Page
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Decisions) >= want || time.Now().After(deadline) {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDecisionLog(t *testing.T) {
	for _, mode := range []string{"enforce", "warn"} {
		t.Run(mode, func(t *testing.T) { testDecisionLog(t, mode) })
	}
}

func testDecisionLog(t *testing.T, mode string) {
	e, vkey, logDir := withLog(t, mode, nil)
	allow := readExample(t, "check_request_allow_rotate.json")
	good, reader := e.token(t, "secrets-engine", "flex-auth", time.Time{}), e.tokenFor(t, "audit", "auditor")
	code, answer := e.post(t, good, allow, "application/json")
	if code != http.StatusOK {
		t.Fatalf("the check: %d %s", code, answer)
	}
	if mode == "enforce" {
		if code, body := e.post(t, e.token(t, "default", "flex-auth", time.Time{}), allow, "application/json"); code != http.StatusForbidden {
			t.Fatalf("a caller of another system: %d %s", code, body)
		}
		if code, body := e.post(t, "", allow, "application/json"); code != http.StatusUnauthorized {
			t.Fatalf("no token: %d %s", code, body)
		}
	}

	// Who may read: the auditor alone, under warn as under enforce.
	for name, tok := range map[string]string{"the caller of the check": good, "no token": ""} {
		if code, body := e.get(t, tok, decisionlog.PathSearch); code != http.StatusForbidden && code != http.StatusUnauthorized {
			t.Errorf("%s reads the decision log: %d %.200s", name, code, body)
		}
	}

	p := e.search(t, reader, "caller="+engine+"&decision=allowed", 1)
	if len(p.Decisions) != 1 {
		t.Fatalf("the allowed check: %d decisions logged", len(p.Decisions))
	}
	var got logged
	if err := json.Unmarshal(p.Decisions[0].Entry, &got); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	_ = json.Compact(&want, answer)
	if got.Service != "pdp" || got.Caller != engine || got.System != "secrets-engine" || !got.Allowed || got.Path != "/v1/check" ||
		got.Status != 200 || !bytes.Equal(got.Answer, want.Bytes()) {
		t.Errorf("logged %+v; want the check's signed answer %s", got, want.Bytes())
	}
	if bytes.Contains(p.Decisions[0].Entry, []byte(good)) {
		t.Error("the log holds the caller's token")
	}
	if mode == "enforce" {
		refused := e.search(t, reader, "decision=refused", 2)
		reasons := map[string]bool{}
		for _, d := range refused.Decisions {
			var r logged
			_ = json.Unmarshal(d.Entry, &r)
			reasons[r.Reason+fmt.Sprint(r.Status)] = !r.Allowed
		}
		if !reasons["principal_cannot_represent_system403"] || !reasons["token_missing401"] {
			t.Errorf("refusals logged: %v", reasons)
		}
	}

	// The auditor proves the decision is in the signed log with x/mod.
	index := p.Decisions[0].Index
	var proved decisionlog.Proved
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := e.get(t, reader, fmt.Sprintf("%s%d", decisionlog.PathEntry, index))
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &proved); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET the decision with its proof: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond) // the first checkpoint is signed within a second
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open([]byte(proved.Checkpoint), note.VerifierList(v))
	if err != nil {
		t.Fatalf("the checkpoint does not verify: %v\n%s", err, proved.Checkpoint)
	}
	origin, size, root, err := translog.ParseCheckpoint(n.Text)
	if err != nil || origin != logOrigin {
		t.Fatalf("checkpoint %q: %v", n.Text, err)
	}
	proof := make(tlog.RecordProof, len(proved.Proof))
	for i, h := range proved.Proof {
		if proof[i], err = tlog.ParseHash(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tlog.CheckRecord(proof, size, root, index, tlog.RecordHash(proved.Entry)); err != nil {
		t.Errorf("the decision's inclusion proof: %v", err)
	}

	// A decision altered on disk, checksum and all, while the log is
	// stopped: the log no longer opens.
	e.stopLog()
	forged := bytes.Replace(proved.Entry, []byte(`"allowed":true`), []byte(`"allowed":fals`), 1)
	if err := translog.Forge(logDir, logOrigin, index, forged); err != nil {
		t.Fatal(err)
	}
	skey, _ := os.ReadFile(filepath.Join(filepath.Dir(logDir), "log.key"))
	if _, err := translog.Open(translog.Config{Dir: logDir, Key: strings.TrimSpace(string(skey)), Metrics: "forged"}); err == nil || !strings.Contains(err.Error(), "does not extend its checkpoint") {
		t.Errorf("a log with an altered decision opened: %v", err)
	}
}

// TestDecisionLogQuota: a caller that holds its share of the log is
// refused, and its flood does not push another caller's decision out of
// the log; without the share, the same flood does.
func TestDecisionLogQuota(t *testing.T) {
	for _, c := range []struct {
		name    string
		share   int64
		evicted bool
	}{{"a share of 128", 128, false}, {"no share to speak of", 1 << 40, true}} {
		t.Run(c.name, func(t *testing.T) {
			e, _, _ := withLog(t, "enforce", func(o *pdp.Options) {
				o.DecisionLog.CallerMaxEntries, o.DecisionLog.MaxEntries = c.share, 256
				o.CallerBindings = append(o.CallerBindings, "billing=system:serviceaccount:billing:billing")
			})
			allow := readExample(t, "check_request_allow_rotate.json")
			other := bytes.Replace(allow, []byte(`"system": "secrets-engine"`), []byte(`"system": "billing"`), 1)
			if code, body := e.post(t, e.tokenFor(t, "billing", "billing"), other, "application/json"); code != http.StatusOK {
				t.Fatalf("billing's check: %d %s", code, body)
			}
			flooder := e.token(t, "secrets-engine", "flex-auth", time.Time{})
			answered := 0
			for range 600 {
				code, body := e.post(t, flooder, allow, "application/json")
				if code == http.StatusOK {
					answered++
					continue
				}
				if code != http.StatusTooManyRequests || !strings.Contains(string(body), decisionlog.ReasonQuotaExceeded.String()) {
					t.Fatalf("the flood: %d %s", code, body)
				}
			}
			if want := min(600, int(c.share)); answered != want {
				t.Errorf("%d of the flood's 600 checks answered, want %d", answered, want)
			}
			// A check past the share is refused before it is evaluated
			// or signed: the records signed are the answers given.
			if signed, _ := signing(t, e); signed != float64(answered+1) {
				t.Errorf("%v records signed for %d answers", signed, answered+1)
			}
			reader := e.tokenFor(t, "audit", "auditor")
			e.search(t, reader, "caller="+engine+"&after="+fmt.Sprint(answered-1), 1) // all committed
			if _, err := e.srv.DecisionLog().Sign(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := e.srv.DecisionLog().Prune(context.Background()); err != nil {
				t.Fatal(err)
			}
			p := e.search(t, reader, "caller=system:serviceaccount:billing:billing", 0)
			if evicted := len(p.Decisions) == 0; evicted != c.evicted {
				t.Errorf("billing's decision evicted by the flood: %v, want %v", evicted, c.evicted)
			}
		})
	}
}

// TestDecisionLogRequired: with the log's disk full, or the log
// stopped, no answer leaves, and the pdp is not ready.
func TestDecisionLogRequired(t *testing.T) {
	e, _, _ := withLog(t, "enforce", nil)
	allow := readExample(t, "check_request_allow_rotate.json")
	good := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	if code, body := e.post(t, good, allow, "application/json"); code != http.StatusOK {
		t.Fatalf("the check: %d %s", code, body)
	}
	if err := e.srv.DecisionLog().Check(context.Background()); err != nil {
		t.Errorf("the log's readiness with its store up: %v", err)
	}
	if _, err := faults.DiskFull(filepath.Join(e.srv.DecisionLog().Translog().Dir(), "segments")); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"its disk full", "stopped"} {
		code, body := e.post(t, good, allow, "application/json")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), decisionlog.ReasonUnavailable.String()) {
			t.Fatalf("a check the log cannot keep (%s): %d %s", when, code, body)
		}
		if err := e.srv.DecisionLog().Check(context.Background()); err == nil {
			t.Errorf("the log is ready, %s", when)
		}
		e.stopLog()
	}
}

// TestDecisionLogReplicas: two pdps that share a key and a PostgreSQL
// search index keep a log each (their origins KEYNAME/a and KEYNAME/b,
// no coordination between them). A search through either finds both
// replicas' decisions, each naming its log; each decision proves, with
// x/mod, in its own replica's signed log.
func TestDecisionLogReplicas(t *testing.T) {
	target := pgtest.Start(t).NewDatabase(t)
	skey, vkey, err := note.GenerateKey(rand.Reader, logOrigin)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "log.key")
	if err := os.WriteFile(keyFile, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	replica := func(name string) func(o *pdp.Options) {
		return func(o *pdp.Options) {
			o.DecisionLog.Search, o.DecisionLog.KeyFile, o.DecisionLog.Replica = target, keyFile, name
		}
	}
	a, _, _ := withLog(t, "enforce", replica("a"))
	b, _, _ := withLog(t, "enforce", replica("b"))
	allow := readExample(t, "check_request_allow_rotate.json")
	const each = 5
	for _, e := range []*env{a, b} {
		good := e.token(t, "secrets-engine", "flex-auth", time.Time{})
		for range each {
			if code, body := e.post(t, good, allow, "application/json"); code != http.StatusOK {
				t.Fatalf("a check: %d %s", code, body)
			}
		}
	}
	replicas := map[string]*env{logOrigin + "/a": a, logOrigin + "/b": b}
	for origin, e := range replicas {
		tok := e.tokenFor(t, "audit", "auditor")
		p := e.search(t, tok, "decision=allowed", 2*each)
		if len(p.Decisions) != 2*each || p.Origin != origin {
			t.Fatalf("%s reads %d decisions of the two replicas' %d (its origin %q)", origin, len(p.Decisions), 2*each, p.Origin)
		}
		byOrigin := map[string]int{}
		for _, d := range p.Decisions {
			byOrigin[d.Origin]++
		}
		if byOrigin[logOrigin+"/a"] != each || byOrigin[logOrigin+"/b"] != each {
			t.Fatalf("%s: decisions by log %v", origin, byOrigin)
		}
	}
	// Each decision proves in the log it names, through its replica,
	// against that replica's checkpoint (its own verifier key).
	tokA := a.tokenFor(t, "audit", "auditor")
	p := a.search(t, tokA, "decision=allowed", 2*each)
	for _, d := range p.Decisions {
		e := replicas[d.Origin]
		rvkey, err := decisionlog.ReplicaVerifierKey(vkey, d.Origin[len(logOrigin)+1:])
		if err != nil {
			t.Fatal(err)
		}
		v, err := note.NewVerifier(rvkey)
		if err != nil {
			t.Fatal(err)
		}
		tok := e.tokenFor(t, "audit", "auditor")
		var proved decisionlog.Proved
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			code, body := e.get(t, tok, fmt.Sprintf("%s%d", decisionlog.PathEntry, d.Index))
			if code == http.StatusOK && json.Unmarshal(body, &proved) == nil && proved.Checkpoint != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("decision %s/%d through its replica: %d %s", d.Origin, d.Index, code, body)
			}
		}
		c, err := translog.OpenCheckpoint([]byte(proved.Checkpoint), v)
		if err != nil {
			t.Fatalf("%s's checkpoint: %v", d.Origin, err)
		}
		rp := make(tlog.RecordProof, len(proved.Proof))
		for i, h := range proved.Proof {
			if rp[i], err = tlog.ParseHash(h); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(proved.Entry, d.Entry) || tlog.CheckRecord(rp, c.Size, c.Root, d.Index, tlog.RecordHash(proved.Entry)) != nil {
			t.Errorf("decision %s/%d does not prove in its log", d.Origin, d.Index)
		}
	}
}

// TestDecisionLogGroups: checks that arrive together under a required
// log are signed together and kept in one commit; every answer that
// leaves is in the log, once, as it left, and a caller past its quota
// is refused alone, the others of its group answered.
func TestDecisionLogGroups(t *testing.T) {
	const share, each = 12, 40
	e, _, _ := withLog(t, "enforce", func(o *pdp.Options) {
		o.DecisionLog.CallerMaxEntries = share
		o.CallerBindings = append(o.CallerBindings, "billing=system:serviceaccount:billing:billing")
	})
	allow := readExample(t, "check_request_allow_rotate.json")
	callers := []struct {
		token string
		body  []byte
	}{
		{e.token(t, "secrets-engine", "flex-auth", time.Time{}), allow},
		{e.tokenFor(t, "billing", "billing"), bytes.Replace(allow, []byte(`"system": "secrets-engine"`), []byte(`"system": "billing"`), 1)},
	}
	type answer struct {
		caller, code int
		body         []byte
		err          error
	}
	answers := make(chan answer, 2*each)
	var wg sync.WaitGroup
	for c, caller := range callers {
		for range each {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/check", bytes.NewReader(caller.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+caller.token)
				resp, err := e.client.Do(req)
				if err != nil {
					answers <- answer{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				answers <- answer{c, resp.StatusCode, b, err}
			})
		}
	}
	wg.Wait()
	close(answers)
	given := [2]map[string]bool{{}, {}}
	for a := range answers {
		switch {
		case a.err != nil:
			t.Fatal(a.err)
		case a.code == http.StatusOK:
			var compact bytes.Buffer
			if err := json.Compact(&compact, a.body); err != nil {
				t.Fatal(err)
			}
			given[a.caller][compact.String()] = true
		case a.code != http.StatusTooManyRequests || !strings.Contains(string(a.body), decisionlog.ReasonQuotaExceeded.String()):
			t.Fatalf("caller %d: %d %s", a.caller, a.code, a.body)
		}
	}
	reader := e.tokenFor(t, "audit", "auditor")
	for c, name := range []string{engine, "system:serviceaccount:billing:billing"} {
		if len(given[c]) != share {
			t.Errorf("%s: %d of %d checks answered, want its share, %d", name, len(given[c]), each, share)
		}
		p := e.search(t, reader, "caller="+name, share)
		kept := map[string]bool{}
		for _, d := range p.Decisions {
			var l logged
			if err := json.Unmarshal(d.Entry, &l); err != nil {
				t.Fatal(err)
			}
			if kept[string(l.Answer)] {
				t.Errorf("%s: an answer kept twice", name)
			}
			kept[string(l.Answer)] = true
		}
		for a := range given[c] {
			if !kept[a] {
				t.Errorf("%s: an answer given but not kept: %.200s", name, a)
			}
		}
		if len(kept) != len(given[c]) {
			t.Errorf("%s: %d answers kept, %d given", name, len(kept), len(given[c]))
		}
	}
	records, signatures := signing(t, e)
	t.Logf("%v checks signed under %v signatures", records, signatures)
	if records <= signatures {
		t.Error("no two checks were signed (and kept) together: the groups were not exercised")
	}
}

// signing reads the pdp's group-commit signing histogram: the records
// /v1/check signed, and the signatures.
func signing(t *testing.T, e *env) (records, signatures float64) {
	t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "pdp_signing_group_records" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), float64(h.GetSampleCount())
		}
	}
	t.Fatal("no pdp_signing_group_records")
	return 0, 0
}
