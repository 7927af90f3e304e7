package pdp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// The interop vectors, AuthZEN 1.0 shape (test/testdata/authzen/README.md).
type vectors struct {
	Evaluation []struct {
		Request  json.RawMessage `json:"request"`
		Expected bool            `json:"expected"`
	} `json:"evaluation"`
	Evaluations []struct {
		Request  json.RawMessage `json:"request"`
		Expected []struct {
			Decision bool `json:"decision"`
		} `json:"expected"`
	} `json:"evaluations"`
}

func (p *pdpProc) post(t *testing.T, token, path string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// effective applies a batch's defaults to an item, as AuthZEN §7.1.1 says:
// the item's members replace the defaults whole.
func effective(top map[string]json.RawMessage, item json.RawMessage) []byte {
	var it map[string]json.RawMessage
	_ = json.Unmarshal(item, &it)
	out := map[string]json.RawMessage{}
	for _, k := range []string{"subject", "action", "resource", "context"} {
		if v, ok := it[k]; ok {
			out[k] = v
		} else if v, ok := top[k]; ok {
			out[k] = v
		}
	}
	b, _ := json.Marshal(out)
	return b
}

// TestAuthZENInterop runs the public AuthZEN Todo interop vectors through
// the real pdp over HTTPS, with a caller authenticated by TokenReview:
// every single evaluation, all of them as one batch and in batches of 10,
// and the vectors' own batches. Every expected decision must hold, and
// every answer must verify on its own.
func TestAuthZENInterop(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	const principal = "system:serviceaccount:todo:todo-backend"
	p := startPackage(t, "../../examples/todo", "enforce", iss.KubeconfigFile(), "todo="+principal)
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "todo", ServiceAccount: "todo-backend", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../testdata/authzen/decisions-authorization-api-1_0-02.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var keys jose.JSONWebKeySet
	jb, _ := os.ReadFile(p.jwks)
	_ = json.Unmarshal(jb, &keys)
	verify := func(answer, request []byte) *decision.EvaluationLeaf {
		t.Helper()
		rec, leaf, err := decision.VerifyEvaluation(answer, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys, Request: request})
		if err != nil {
			t.Fatalf("an answer does not verify: %v\n%s", err, answer)
		}
		if rec.Caller.Principal != principal || !rec.Caller.Authenticated {
			t.Fatalf("the record names %+v, not the caller", rec.Caller)
		}
		return leaf
	}

	// Single evaluations.
	pass := 0
	for i, c := range v.Evaluation {
		code, body := p.post(t, tok.Token, pdp.PathEvaluation, c.Request)
		if code != 200 {
			t.Errorf("evaluation %d: %d %s", i, code, body)
			continue
		}
		if leaf := verify(body, c.Request); leaf.Decision == c.Expected {
			pass++
		} else {
			t.Errorf("evaluation %d %s: decision %t (%s), want %t", i, c.Request, leaf.Decision, leaf.Reason, c.Expected)
		}
	}
	t.Logf("single evaluations: %d of %d as expected", pass, len(v.Evaluation))

	// The same, batched: all 40 in one request, then in batches of 10.
	for _, size := range []int{len(v.Evaluation), 10} {
		pass = 0
		for start := 0; start < len(v.Evaluation); start += size {
			part := v.Evaluation[start:min(start+size, len(v.Evaluation))]
			var items []json.RawMessage
			for _, c := range part {
				items = append(items, c.Request)
			}
			body, _ := json.Marshal(map[string]any{"evaluations": items})
			code, resp := p.post(t, tok.Token, pdp.PathEvaluations, body)
			if code != 200 {
				t.Fatalf("batch of %d: %d %s", size, code, resp)
			}
			var r struct{ Evaluations []json.RawMessage }
			_ = json.Unmarshal(resp, &r)
			if len(r.Evaluations) != len(part) {
				t.Fatalf("batch of %d: %d answers", len(part), len(r.Evaluations))
			}
			for i, a := range r.Evaluations {
				if leaf := verify(a, part[i].Request); leaf.Decision == part[i].Expected && leaf.Index == i {
					pass++
				} else {
					t.Errorf("batch item %d: %+v, want %t", start+i, leaf, part[i].Expected)
				}
			}
		}
		t.Logf("batched %d per request: %d of %d as expected", size, pass, len(v.Evaluation))
	}

	// The vectors' own batches, with their defaults.
	pass, total := 0, 0
	for i, c := range v.Evaluations {
		code, resp := p.post(t, tok.Token, pdp.PathEvaluations, c.Request)
		if code != 200 {
			t.Fatalf("vector batch %d: %d %s", i, code, resp)
		}
		var top map[string]json.RawMessage
		_ = json.Unmarshal(c.Request, &top)
		var items []json.RawMessage
		_ = json.Unmarshal(top["evaluations"], &items)
		var r struct{ Evaluations []json.RawMessage }
		_ = json.Unmarshal(resp, &r)
		for j, want := range c.Expected {
			total++
			if j >= len(r.Evaluations) {
				t.Errorf("vector batch %d: no answer %d", i, j)
				continue
			}
			if leaf := verify(r.Evaluations[j], effective(top, items[j])); leaf.Decision == want.Decision {
				pass++
			} else {
				t.Errorf("vector batch %d item %d: %t, want %t", i, j, leaf.Decision, want.Decision)
			}
		}
	}
	t.Logf("the vectors' batches: %d of %d as expected", pass, total)

	// One answer checked by the consumer's CLI.
	dir := t.TempDir()
	code, body := p.post(t, tok.Token, pdp.PathEvaluation, v.Evaluation[4].Request)
	if code != 200 {
		t.Fatal(code)
	}
	af, rf := filepath.Join(dir, "answer.json"), filepath.Join(dir, "request.json")
	_ = os.WriteFile(af, body, 0o600)
	_ = os.WriteFile(rf, v.Evaluation[4].Request, 0o600)
	out, err := exec.Command(callerauthBin, "decision", "verify", "--authzen", "--jwks", p.jwks, "--request", rf, af).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verified: decision true, reason evil_genius_may_change_any_todo, evaluation 1 of 1, caller "+principal) {
		t.Errorf("callerauth decision verify --authzen: %v\n%s", err, out)
	}

	// Discovery.
	resp, err := p.client.Get(p.url + pdp.PathAuthZENConfig)
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	// No --authzen-base-url: the serving certificate's first name (localhost)
	// and the port served on — never the Host the request named.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "https://"))
	id := "https://localhost:" + port
	if meta["policy_decision_point"] != id || meta["access_evaluation_endpoint"] != id+pdp.PathEvaluation || meta["access_evaluations_endpoint"] != id+pdp.PathEvaluations {
		t.Errorf("discovery document %v; want it to name %s", meta, id)
	}
}

// TestAuthZENPre10Vectors: the older decisions.json expects the same 40
// decisions as the 1.0 file, and its pre-1.0 requests (members beside type
// and id) are refused with 400 naming the member, never decided on part of
// what was sent.
func TestAuthZENPre10Vectors(t *testing.T) {
	read := func(name string) []struct {
		Request  json.RawMessage `json:"request"`
		Expected bool            `json:"expected"`
	} {
		b, err := os.ReadFile("../testdata/authzen/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, raw := range m {
			var v []struct {
				Request  json.RawMessage `json:"request"`
				Expected bool            `json:"expected"`
			}
			if json.Unmarshal(raw, &v) == nil && len(v) == 40 {
				return v
			}
		}
		t.Fatalf("%s: no list of 40 decisions", name)
		return nil
	}
	old, cur := read("decisions.json"), read("decisions-authorization-api-1_0-02.json")
	for i := range old {
		if old[i].Expected != cur[i].Expected {
			t.Errorf("decision %d: decisions.json expects %t, the 1.0 file %t", i, old[i].Expected, cur[i].Expected)
		}
	}
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	p := startPackage(t, "../../examples/todo", "enforce", iss.KubeconfigFile(), "todo=system:serviceaccount:todo:todo-backend")
	tok, _ := iss.Mint(devissuer.TokenRequest{Namespace: "todo", ServiceAccount: "todo-backend", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	code, body := p.post(t, tok.Token, pdp.PathEvaluation, old[0].Request)
	if code != 400 || !strings.Contains(string(body), `"field":"subject.identity"`) {
		t.Errorf("a pre-1.0 request: %d %s; want 400 naming subject.identity", code, body)
	}
	if testing.Verbose() {
		fmt.Println("pre-1.0 request refused:", strings.TrimSpace(string(body)))
	}
}
