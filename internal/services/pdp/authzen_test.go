package pdp_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

const todo = "../../../examples/todo"

// The Todo scenario's users (examples/todo/registry.json).
const (
	rick  = "CiRmZDA2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs" // admin, evil_genius
	morty = "CiRmZDE2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs" // editor
	beth  = "CiRmZDM2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs" // viewer
)

func startTodo(t *testing.T) (*env, string) {
	t.Helper()
	e := start(t, "enforce", func(o *pdp.Options) {
		o.PolicyDir, o.Registry = filepath.Join(todo, "policy"), filepath.Join(todo, "registry.json")
		o.CallerBindings = []string{"todo=system:serviceaccount:secrets-engine:todo-backend",
			"secrets-engine=system:serviceaccount:secrets-engine:todo-backend"} // to reach /v1/check's own refusal
	})
	return e, e.token(t, "todo-backend", "flex-auth", time.Time{})
}

func (e *env) authzen(t *testing.T, tok, path, body string) (int, []byte) {
	t.Helper()
	return e.post(t, tok, []byte(body), "application/json", path)
}

type answer struct {
	Decision bool                       `json:"decision"`
	Context  map[string]json.RawMessage `json:"context"`
}

// verifyItem verifies one answer on its own against the evaluation
// request it answers.
func verifyItem(t *testing.T, e *env, raw json.RawMessage, request string) *decision.EvaluationLeaf {
	t.Helper()
	_, leaf, err := decision.VerifyEvaluation(raw, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: e.srv.EvaluationSigner().JWKS(), Request: []byte(request)})
	if err != nil {
		t.Fatalf("answer %s does not verify against %s: %v", raw, request, err)
	}
	return leaf
}

func TestAuthZENSingle(t *testing.T) {
	e, tok := startTodo(t)
	req := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_update_todo"},"resource":{"type":"todo","id":"t1","properties":{"ownerID":"morty@the-citadel.com"}}}`, morty)
	code, body := e.authzen(t, tok, pdp.PathEvaluation, req)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	leaf := verifyItem(t, e, body, req)
	if !leaf.Decision || leaf.Reason != "editor_may_change_own_todo" {
		t.Fatalf("morty updating his own todo: %+v", leaf)
	}
	var a answer
	_ = json.Unmarshal(body, &a)
	if !a.Decision {
		t.Fatalf("answer %s", body)
	}
	// The record names the caller.
	var p decision.EvaluationProof
	_ = json.Unmarshal(a.Context[decision.ContextKey], &p)
	rec, _, _ := decision.VerifyEvaluation(body, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: e.srv.EvaluationSigner().JWKS()})
	if rec.Caller.Principal != "system:serviceaccount:secrets-engine:todo-backend" || rec.Evaluations != 1 || rec.PolicyVersion != "v1" {
		t.Fatalf("record %+v", rec)
	}
	// No token, another caller: refused before any evaluation.
	if code, body := e.authzen(t, "", pdp.PathEvaluation, req); code != 401 || !strings.Contains(string(body), "token_missing") {
		t.Fatalf("no token: %d %s", code, body)
	}
	other := e.token(t, "default", "flex-auth", time.Time{})
	if code, body := e.authzen(t, other, pdp.PathEvaluation, req); code != 403 || !strings.Contains(string(body), "principal_cannot_represent_system") {
		t.Fatalf("a caller not bound to system todo: %d %s", code, body)
	}
}

func TestAuthZENBatchSemantics(t *testing.T) {
	e, tok := startTodo(t)
	item := func(owner string) string {
		return fmt.Sprintf(`{"resource":{"type":"todo","id":"t-%s","properties":{"ownerID":%q}}}`, owner, owner)
	}
	// Morty: rick's todo (deny), his own (allow), rick's again (deny).
	items := []string{item("rick@the-citadel.com"), item("morty@the-citadel.com"), item("rick@the-citadel.com")}
	batch := func(semantic string) string {
		opts := ""
		if semantic != "" {
			opts = fmt.Sprintf(`,"options":{"evaluations_semantic":%q}`, semantic)
		}
		return fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_update_todo"},"evaluations":[%s]%s}`, morty, strings.Join(items, ","), opts)
	}
	for _, c := range []struct {
		semantic string
		want     []bool
	}{
		{"", []bool{false, true, false}},
		{"execute_all", []bool{false, true, false}},
		{"deny_on_first_deny", []bool{false}},
		{"permit_on_first_permit", []bool{false, true}},
	} {
		code, body := e.authzen(t, tok, pdp.PathEvaluations, batch(c.semantic))
		if code != 200 {
			t.Fatalf("%s: %d %s", c.semantic, code, body)
		}
		var resp struct{ Evaluations []json.RawMessage }
		_ = json.Unmarshal(body, &resp)
		if len(resp.Evaluations) != len(c.want) {
			t.Fatalf("%s: %d answers, want %d: %s", c.semantic, len(resp.Evaluations), len(c.want), body)
		}
		sigs := map[string]bool{}
		for i, raw := range resp.Evaluations {
			var it map[string]json.RawMessage
			_ = json.Unmarshal([]byte(items[i]), &it)
			req := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_update_todo"},"resource":%s}`, morty, it["resource"])
			leaf := verifyItem(t, e, raw, req)
			if leaf.Decision != c.want[i] || leaf.Index != i {
				t.Errorf("%s item %d: %+v, want decision %t", c.semantic, i, leaf, c.want[i])
			}
			var a answer
			_ = json.Unmarshal(raw, &a)
			var p decision.EvaluationProof
			_ = json.Unmarshal(a.Context[decision.ContextKey], &p)
			sigs[p.RecordJWS] = true
		}
		if len(sigs) != 1 {
			t.Errorf("%s: %d signatures, want one for the batch", c.semantic, len(sigs))
		}
	}
}

// TestAuthZENDefaultsReplacedWhole: an item's member replaces the default
// whole; nothing of the default's properties leaks into it.
func TestAuthZENDefaultsReplacedWhole(t *testing.T) {
	e, tok := startTodo(t)
	body := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_update_todo"},
		"resource":{"type":"todo","id":"t1","properties":{"ownerID":"morty@the-citadel.com"}},
		"evaluations":[{},{"resource":{"type":"todo","id":"t1"}},{"action":{"name":"can_read_todos"}}]}`, morty)
	code, resp := e.authzen(t, tok, pdp.PathEvaluations, body)
	if code != 200 {
		t.Fatalf("%d %s", code, resp)
	}
	var r struct{ Evaluations []answer }
	_ = json.Unmarshal(resp, &r)
	got := []bool{r.Evaluations[0].Decision, r.Evaluations[1].Decision, r.Evaluations[2].Decision}
	if fmt.Sprint(got) != "[true false true]" {
		t.Fatalf("decisions %v; want [true false true]: the default's ownerID must not reach the item that names its own resource\n%s", got, resp)
	}
}

// TestAuthZENOneItemRefused: an item the schema cannot take is answered
// false with an error in its context; the others are decided.
func TestAuthZENOneItemRefused(t *testing.T) {
	e, tok := startTodo(t)
	body := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_update_todo"},"evaluations":[
		{"resource":{"type":"todo","id":"a","properties":{"ownerID":"rick@the-citadel.com"}}},
		{"resource":{"type":"todo","id":"b","properties":{"ownerID":42}}},
		{"resource":{"type":"spaceship","id":"c"}},
		{"subject":{"type":"user","id":"nobody"}, "resource":{"type":"todo","id":"d"}},
		{"action":{"name":"can_fly"}, "resource":{"type":"todo","id":"e"}}]}`, rick)
	code, resp := e.authzen(t, tok, pdp.PathEvaluations, body)
	if code != 200 {
		t.Fatalf("%d %s", code, resp)
	}
	var r struct{ Evaluations []answer }
	_ = json.Unmarshal(resp, &r)
	want := []struct {
		decision bool
		reason   string
		err      bool
	}{
		{true, "evil_genius_may_change_any_todo", false},
		{false, "invalid_evaluation", true},
		{false, "resource_type_unknown", false},
		{false, "subject_unknown", false},
		{false, "action_unknown", false},
	}
	for i, w := range want {
		a := r.Evaluations[i]
		var p decision.EvaluationProof
		_ = json.Unmarshal(a.Context[decision.ContextKey], &p)
		_, hasErr := a.Context["error"]
		if a.Decision != w.decision || p.Reason != w.reason || hasErr != w.err {
			t.Errorf("item %d: decision %t reason %q error %t; want %t %q %t", i, a.Decision, p.Reason, hasErr, w.decision, w.reason, w.err)
		}
	}
	if !strings.Contains(string(r.Evaluations[1].Context["error"]), "ownerID") {
		t.Errorf("the invalid item's error does not name ownerID: %s", r.Evaluations[1].Context["error"])
	}
}

// TestAuthZENMalformed: a request that is not AuthZEN is 400 naming the
// member, before any evaluation: a member the text defines missing or of
// another type, at the top level or in a default a batch shares.
func TestAuthZENMalformed(t *testing.T) {
	e, tok := startTodo(t)
	sub := fmt.Sprintf(`{"type":"user","id":%q}`, morty)
	for _, c := range []struct {
		path, body, field string
	}{
		{pdp.PathEvaluation, `{"subject":` + sub + `,"action":{"name":"can_read_todos"}}`, "resource"},
		{pdp.PathEvaluation, `{"subject":` + sub + `,"action":{"name":"can_read_todos"},"resource":{"type":"todo"}}`, "resource.id"},
		{pdp.PathEvaluation, `{"subject":{"type":"user","id":5},"action":{"name":"x"},"resource":{"type":"todo","id":"a"}}`, "subject.id"},
		{pdp.PathEvaluation, `{"subject":` + sub + `,"action":{"name":"x"},"resource":{"type":"todo","id":"a","properties":[1]}}`, "resource.properties"},
		{pdp.PathEvaluation, `{"subject":` + sub + `,"subject":` + sub + `,"action":{"name":"x"},"resource":{"type":"todo","id":"a"}}`, "subject"},
		{pdp.PathEvaluations, `{"options":{"evaluations_semantic":"first"},"evaluations":[]}`, "options.evaluations_semantic"},
		{pdp.PathEvaluations, `{"options":{"parallel":true},"evaluations":[]}`, "subject"},
		{pdp.PathEvaluations, `{"subject":"alice","evaluations":[{"action":{"name":"x"},"resource":{"type":"todo","id":"a"}}]}`, "subject"},
		{pdp.PathEvaluations, `{"evaluations":[1]}`, "evaluations[0]"},
		{pdp.PathEvaluations, `{"evaluations":{}}`, "evaluations"},
	} {
		code, body := e.authzen(t, tok, c.path, c.body)
		if code != 400 || !strings.Contains(string(body), `"field":"`+c.field+`"`) {
			t.Errorf("%s %s: %d %s; want 400 naming %s", c.path, c.body, code, body, c.field)
		}
	}
}

func TestAuthZENDiscoveryAndAPIs(t *testing.T) {
	e, tok := startTodo(t)
	// Plain HTTP has no AuthZEN identifier (an https URL), whatever Host
	// the request names: no metadata.
	req, _ := http.NewRequest(http.MethodGet, e.url+pdp.PathAuthZENConfig, nil)
	req.Host = "evil.example"
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no_pdp_identifier") || strings.Contains(string(b), "evil.example") {
		t.Fatalf("metadata over plain HTTP: %d %s", resp.StatusCode, b)
	}
	// Configured, the identifier is the configured URL, never the Host.
	named := start(t, "enforce", func(o *pdp.Options) {
		o.PolicyDir, o.Registry = filepath.Join(todo, "policy"), filepath.Join(todo, "registry.json")
		o.AuthZENBaseURL = "https://pdp.example:8443/"
	})
	req, _ = http.NewRequest(http.MethodGet, named.url+pdp.PathAuthZENConfig, nil)
	req.Host = "evil.example"
	if resp, err = named.client.Do(req); err != nil {
		t.Fatal(err)
	}
	var meta map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	base := "https://pdp.example:8443"
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") == "" || meta["policy_decision_point"] != base ||
		meta["access_evaluation_endpoint"] != base+"/access/v1/evaluation" || meta["access_evaluations_endpoint"] != base+"/access/v1/evaluations" {
		t.Fatalf("metadata %d %v", resp.StatusCode, meta)
	}
	if code, body := e.post(t, tok, readExample(t, "check_request_allow_rotate.json"), "application/json"); code != http.StatusNotFound || !strings.Contains(string(body), "api_not_served") {
		t.Fatalf("/v1/check on an AuthZEN package: %d %s", code, body)
	}
	se := start(t, "enforce", nil)
	setok := se.token(t, "secrets-engine", "flex-auth", time.Time{})
	if code, body := se.authzen(t, setok, pdp.PathEvaluation, `{"subject":{"type":"user","id":"a"},"action":{"name":"x"},"resource":{"type":"t","id":"a"}}`); code != http.StatusNotFound || !strings.Contains(string(body), "api_not_served") {
		t.Fatalf("AuthZEN on a /v1/check package: %d %s", code, body)
	}
}

// TestAuthZENEchoesTheRequestID: every response of every AuthZEN endpoint
// carries the X-Request-ID its request did (AuthZEN 1.0 §10.1.3, a MUST):
// a decision, a batch, a bad request, a refused caller, the metadata.
func TestAuthZENEchoesTheRequestID(t *testing.T) {
	e, tok := startTodo(t)
	good := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t1"}}`, morty)
	for _, c := range []struct {
		name, method, path, token, body string
		code                            int
	}{
		{"a decision", http.MethodPost, pdp.PathEvaluation, tok, good, 200},
		{"a batch", http.MethodPost, pdp.PathEvaluations, tok, `{"evaluations":[` + good + `]}`, 200},
		{"a bad request", http.MethodPost, pdp.PathEvaluation, tok, `{"subject":7}`, 400},
		{"no token", http.MethodPost, pdp.PathEvaluation, "", good, 401},
		{"the metadata (none over plain HTTP)", http.MethodGet, pdp.PathAuthZENConfig, "", "", 404},
	} {
		req, err := http.NewRequest(c.method, e.url+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(pdp.HeaderRequestID, "bfe9eb29-ab87-4ca3-be83-a1d5d8305716")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.code || resp.Header.Get(pdp.HeaderRequestID) != "bfe9eb29-ab87-4ca3-be83-a1d5d8305716" {
			t.Errorf("%s: %d, X-Request-ID %q; want %d and the request's", c.name, resp.StatusCode, resp.Header.Get(pdp.HeaderRequestID), c.code)
		}
	}
}

// TestAuthZENEmptyOrMissingEvaluations: on the evaluations endpoint, a
// request with no evaluations array, or an empty one, is one evaluation
// of its top-level members (AuthZEN 1.0 §7.1), answered as the single
// evaluation endpoint answers (§6): a decision, not an evaluations array.
func TestAuthZENEmptyOrMissingEvaluations(t *testing.T) {
	e, tok := startTodo(t)
	single := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t1"}}`, morty)
	for name, body := range map[string]string{
		"missing": single,
		"empty":   strings.TrimSuffix(single, "}") + `,"evaluations":[]}`,
	} {
		code, resp := e.authzen(t, tok, pdp.PathEvaluations, body)
		var top map[string]json.RawMessage
		if code != 200 || json.Unmarshal(resp, &top) != nil || top["evaluations"] != nil || string(top["decision"]) != "true" {
			t.Fatalf("%s: %d %s; want a single decision", name, code, resp)
		}
		verifyItem(t, e, resp, single)
	}
}

// postID posts an AuthZEN request with an X-Request-ID.
func (e *env) postID(t *testing.T, tok, path, body, id string) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	if id != "" {
		req.Header.Set(pdp.HeaderRequestID, id)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// TestAuthZENIgnoresWhatItDoesNotRead: members the text does not define,
// and properties and context the package's schema does not declare, are
// ignored (AuthZEN 1.0 §10.1.1), never a refusal or a deny by themselves;
// the signed record lists each by path, the request-level ones in the
// record and an evaluation's in its leaf.
func TestAuthZENIgnoresWhatItDoesNotRead(t *testing.T) {
	e, tok := startTodo(t)
	keys := e.srv.EvaluationSigner().JWKS()
	todoOf := func(owner string) string {
		return fmt.Sprintf(`{"type":"todo","id":"t1","properties":{"ownerID":%q}}`, owner)
	}
	for _, c := range []struct {
		name, endpoint, body string
		decision             bool
		record, leaf         []string
	}{
		{"the specification's unknown member example", pdp.PathEvaluation,
			`{"subject":{"type":"user","id":"` + morty + `","_note":"ID for Morty"},"action":{"name":"can_update_todo"},"resource":` + todoOf("morty@the-citadel.com") + `,"foo":"bar","futureField":{"nested":true}}`,
			true, []string{"foo", "futureField", "subject._note"}, []string{}},
		{"context, action properties and registry properties", pdp.PathEvaluation,
			`{"subject":{"type":"user","id":"` + rick + `","properties":{"department":"Sales","roles":["viewer"]}},"action":{"name":"can_delete_todo","properties":{"method":"DELETE"}},"resource":` + todoOf("x@y") + `,"context":{"time":"2025-06-27T18:03-07:00","ip":null}}`,
			true, []string{}, []string{"subject.properties.department", "subject.properties.roles", "context.time", "context.ip", "action.properties.method"}},
		{"an undeclared resource property and a null one", pdp.PathEvaluation,
			`{"subject":{"type":"user","id":"` + morty + `"},"action":{"name":"can_update_todo"},"resource":{"type":"todo","id":"t","properties":{"ownerID":"morty@the-citadel.com","color":"red","due":null}}}`,
			true, []string{}, []string{"resource.properties.color", "resource.properties.due"}},
		{"options of the single endpoint", pdp.PathEvaluation,
			`{"subject":{"type":"user","id":"` + morty + `"},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t"},"options":{"evaluations_semantic":"deny_on_first_deny"},"evaluations":[]}`,
			true, []string{"options", "evaluations"}, []string{}},
		{"a batch's unknown option and item member", pdp.PathEvaluations,
			`{"subject":{"type":"user","id":"` + morty + `","_note":"n"},"options":{"evaluations_semantic":"execute_all","another_option":"value"},"evaluations":[{"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t"},"extra":1}]}`,
			true, []string{"options.another_option", "subject._note"}, []string{"evaluations[0].extra"}},
	} {
		endpoint := strings.TrimPrefix(c.endpoint, "/access/v1/")
		code, body, h := e.postID(t, tok, c.endpoint, c.body, "req-"+c.name)
		if code != 200 || h.Get(pdp.HeaderRequestID) != "req-"+c.name {
			t.Fatalf("%s: %d %s (X-Request-ID %q)", c.name, code, body, h.Get(pdp.HeaderRequestID))
		}
		rec, leaves, err := decision.VerifyEvaluations(endpoint, []byte(c.body), body, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys, RequestID: "req-" + c.name})
		if err != nil {
			t.Fatalf("%s: the response does not verify: %v\n%s", c.name, err, body)
		}
		if leaves[0].Decision != c.decision || !slices.Equal(rec.Ignored, c.record) || !slices.Equal(leaves[0].Ignored, c.leaf) {
			t.Errorf("%s: decision %t (%s), record ignores %q, leaf ignores %q; want %t, %q, %q", c.name, leaves[0].Decision, leaves[0].Reason, rec.Ignored, leaves[0].Ignored, c.decision, c.record, c.leaf)
		}
		if _, _, err := decision.VerifyEvaluations(endpoint, []byte(c.body), body, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys, RequestID: "another"}); !errors.Is(err, decision.ErrRequestMismatch) {
			t.Errorf("%s: verified under another X-Request-ID: %v", c.name, err)
		}
	}
}

// TestAuthZENItemErrors: in a batch, an item that cannot be read is that
// item's false decision with its error in the context (the certification
// scenario's execute_all case), not a refusal of the batch; the error is
// bound by the signature.
func TestAuthZENItemErrors(t *testing.T) {
	e, tok := startTodo(t)
	body := `{"subject":{"type":"user","id":"` + rick + `"},"action":{"name":"can_read_todos"},"options":{"evaluations_semantic":"execute_all"},
		"evaluations":[{"resource":{"type":"todo","id":"t"}},{},{"resource":{"type":"todo"}},{"resource":"t"}]}`
	code, resp, _ := e.postID(t, tok, pdp.PathEvaluations, body, "")
	if code != 200 {
		t.Fatalf("%d %s", code, resp)
	}
	rec, leaves, err := decision.VerifyEvaluations("evaluations", []byte(body), resp, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: e.srv.EvaluationSigner().JWKS()})
	if err != nil || rec.Requested != 4 || len(leaves) != 4 {
		t.Fatalf("%v\n%s", err, resp)
	}
	var r struct{ Evaluations []answer }
	_ = json.Unmarshal(resp, &r)
	for i, want := range []string{"", "evaluations[1].resource is required", "evaluations[2].resource.id is required", "evaluations[3].resource must be a JSON object"} {
		got := string(r.Evaluations[i].Context["error"])
		if (want == "") != (got == "") || !strings.Contains(got, want) || (want != "" && (leaves[i].Decision || leaves[i].Reason != "invalid_evaluation")) {
			t.Errorf("item %d: error %s, leaf %+v; want %q", i, got, leaves[i], want)
		}
	}
	// The error is signed: rewriting it breaks the answer.
	edited := strings.Replace(string(resp), "evaluations[1].resource is required", "evaluations[1].resource is fine", 1)
	if _, _, err := decision.VerifyEvaluations("evaluations", []byte(body), []byte(edited), decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: e.srv.EvaluationSigner().JWKS()}); !errors.Is(err, decision.ErrSignature) {
		t.Errorf("an edited context.error verified: %v", err)
	}
}

const certification = "../../../examples/authzen-certification"

// TestAuthZENThousandItems: a batch of MaxEvaluations fully specified
// items (every member, properties and context) fits the default
// --authzen-max-body-bytes and is answered and verified whole; a smaller
// limit refuses it naming the body. It logs the sizes docs/pdp.md quotes.
func TestAuthZENThousandItems(t *testing.T) {
	var items []string
	for i := range pdp.MaxEvaluations {
		items = append(items, fmt.Sprintf(`{"subject":{"type":"user","id":"bob","properties":{"role":"admin","department":"Legal"}},`+
			`"action":{"name":"delete","properties":{"soft":%t,"method":"DELETE"}},`+
			`"resource":{"type":"record","id":"record-%d","properties":{"status":"archived","owner":"alice"}},`+
			`"context":{"time":"2025-06-27T18:03-07:00","ip":"192.168.1.1","source":"batch-%04d"}}`, i%2 == 0, 1+i%2, i))
	}
	body := `{"evaluations":[` + strings.Join(items, ",") + `]}`
	for _, limit := range []int64{pdp.DefaultAuthZENMaxBody, 256 << 10} {
		e := start(t, "enforce", func(o *pdp.Options) {
			o.PolicyDir, o.Registry = filepath.Join(certification, "policy"), filepath.Join(certification, "registry.json")
			o.CallerBindings = []string{"authzen-certification=system:serviceaccount:secrets-engine:pep"}
			o.AuthZENMaxBody = limit
		})
		tok := e.token(t, "pep", "flex-auth", time.Time{})
		code, resp := e.authzen(t, tok, pdp.PathEvaluations, body)
		if limit != pdp.DefaultAuthZENMaxBody {
			if code != 400 || !strings.Contains(string(resp), `"field":"body"`) {
				t.Errorf("--authzen-max-body-bytes %d: %d %.200s; want 400 naming the body", limit, code, resp)
			}
			continue
		}
		if code != 200 {
			t.Fatalf("%d items, %d bytes: %d %.300s", pdp.MaxEvaluations, len(body), code, resp)
		}
		_, leaves, err := decision.VerifyEvaluations("evaluations", []byte(body), resp, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: e.srv.EvaluationSigner().JWKS()})
		if err != nil || len(leaves) != pdp.MaxEvaluations {
			t.Fatalf("%v", err)
		}
		for i, l := range leaves {
			if l.Decision != (i%2 == 0) || len(l.Ignored) != 6 {
				t.Fatalf("item %d: %+v", i, l)
			}
		}
		// The same answer to a client that accepts gzip: compressed on the wire.
		req, _ := http.NewRequest(http.MethodPost, e.url+pdp.PathEvaluations, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Accept-Encoding", "gzip")
		hr, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		wire, _ := io.ReadAll(hr.Body)
		hr.Body.Close()
		zr, err := gzip.NewReader(bytes.NewReader(wire))
		if err != nil || hr.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("a client accepting gzip: %v, Content-Encoding %q", err, hr.Header.Get("Content-Encoding"))
		}
		plain, _ := io.ReadAll(zr)
		if _, _, err := decision.VerifyEvaluations("evaluations", []byte(body), plain, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: e.srv.EvaluationSigner().JWKS()}); err != nil {
			t.Fatalf("the gzip answer: %v", err)
		}
		t.Logf("%d fully specified items: request %d bytes (%d per item, default limit %d), answer %d bytes (%d per item), %d gzip-compressed (%d per item)",
			pdp.MaxEvaluations, len(body), len(body)/pdp.MaxEvaluations, pdp.DefaultAuthZENMaxBody, len(resp), len(resp)/pdp.MaxEvaluations, len(wire), len(wire)/pdp.MaxEvaluations)
	}
}

// TestAuthZENSinglesShareASignature: single evaluations that arrive while
// one is being signed share the next signature (--sign-group-max, as
// checks do): each answer carries its record, the root's JWS and the
// record's proof, and verifies alone against its own request; a lone
// evaluation is a tree of one. A batch keeps its one record JWS. With
// --sign-group-max 0 every single evaluation is signed alone, in the
// record_jws form.
func TestAuthZENSinglesShareASignature(t *testing.T) {
	e, tok := startTodo(t)
	keys := e.srv.EvaluationSigner().JWKS()
	req := func(i int) string {
		return fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_update_todo"},"resource":{"type":"todo","id":"t%d","properties":{"ownerID":"morty@the-citadel.com"}}}`, morty, i)
	}
	proofOf := func(body []byte) decision.EvaluationProof {
		t.Helper()
		var a answer
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		var p decision.EvaluationProof
		if err := json.Unmarshal(a.Context[decision.ContextKey], &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	code, lone := e.authzen(t, tok, pdp.PathEvaluation, req(0))
	if code != 200 {
		t.Fatalf("%d %s", code, lone)
	}
	if p := proofOf(lone); p.RecordJWS != "" || p.RootJWS == "" || p.RecordProof == nil || len(p.RecordProof.Hashes) != 0 {
		t.Fatalf("a lone single evaluation: %s; want the group form, a tree of one", lone)
	}
	verifyItem(t, e, lone, req(0))

	shared := 0
	for round := 0; round < 20 && shared == 0; round++ {
		const n = 32
		bodies := make([][]byte, n)
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-begin
				_, bodies[i] = e.authzen(t, tok, pdp.PathEvaluation, req(i))
			})
		}
		close(begin)
		wg.Wait()
		roots := map[string]int{}
		for i, b := range bodies {
			if _, _, err := decision.VerifyEvaluation(b, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys, Request: []byte(req(i))}); err != nil {
				t.Fatalf("round %d, evaluation %d: %v\n%s", round, i, err, b)
			}
			if _, _, err := decision.VerifyEvaluation(b, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys, Request: []byte(req((i + 1) % n))}); err == nil {
				t.Fatalf("round %d, evaluation %d verified against another request", round, i)
			}
			roots[proofOf(b).RootJWS]++
		}
		for _, k := range roots {
			if k > 1 {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Error("20 rounds of 32 concurrent single evaluations, and no root covered two")
	}

	batch := fmt.Sprintf(`{"subject":{"type":"user","id":%q},"action":{"name":"can_update_todo"},"evaluations":[{"resource":{"type":"todo","id":"a","properties":{"ownerID":"morty@the-citadel.com"}}}]}`, morty)
	if code, body := e.authzen(t, tok, pdp.PathEvaluations, batch); code != 200 || !strings.Contains(string(body), `"record_jws":`) || strings.Contains(string(body), `"root_jws"`) {
		t.Errorf("a batch: %d %s; want its one record JWS", code, body)
	}

	alone := start(t, "enforce", func(o *pdp.Options) {
		o.PolicyDir, o.Registry = filepath.Join(todo, "policy"), filepath.Join(todo, "registry.json")
		o.CallerBindings = []string{"todo=system:serviceaccount:secrets-engine:todo-backend"}
		o.SignGroupMax = 0
	})
	code, body := alone.authzen(t, alone.token(t, "todo-backend", "flex-auth", time.Time{}), pdp.PathEvaluation, req(0))
	if p := proofOf(body); code != 200 || p.RecordJWS == "" || p.RootJWS != "" {
		t.Errorf("--sign-group-max 0: %d %s; want the record_jws form", code, body)
	}
}

// TestEvaluationProfileIsTheDocs: the profile the pdp signs AuthZEN
// answers with is the one docs/pdp.md's worked examples are made with
// (decision.TestSignedFormsWorked) and states.
func TestEvaluationProfileIsTheDocs(t *testing.T) {
	if pdp.EvaluationProfile.Schema != "callerauth.authzen-evaluations.v3" || pdp.EvaluationProfile.Type != "callerauth-authzen+jwt" ||
		pdp.EvaluationProfile.Root().Type != "callerauth-authzen-root+jwt" || pdp.EvaluationProfile.Root().Schema != "callerauth.authzen-evaluations.v3.root" {
		t.Fatalf("pdp.EvaluationProfile %+v (root %+v) is not docs/pdp.md's", pdp.EvaluationProfile, pdp.EvaluationProfile.Root())
	}
}

// TestAuthZENWhichRequestsGetWhichForm: as docs/pdp.md's "The signed
// forms, exactly" states — a request answered with one answer (the
// single endpoint; the evaluations endpoint without evaluations, or with
// "evaluations": []) is answered as a single evaluation, in the group
// form (exactly record, root_jws and record_proof); a non-empty batch —
// of one item, or cut short at its first — is answered in the
// evaluations shape, each item exactly in the record_jws form.
func TestAuthZENWhichRequestsGetWhichForm(t *testing.T) {
	e, tok := startTodo(t)
	one := fmt.Sprintf(`"subject":{"type":"user","id":%q},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t"}`, morty)
	members := func(raw json.RawMessage) []string {
		var a struct {
			Context map[string]map[string]json.RawMessage `json:"context"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		var ms []string
		for k := range a.Context[decision.ContextKey] {
			ms = append(ms, k)
		}
		slices.Sort(ms)
		return ms
	}
	group := []string{"ignored", "index", "proof", "reason", "record", "record_proof", "request_digest", "root_jws"}
	jws := []string{"ignored", "index", "proof", "reason", "record_jws", "request_digest"}
	for _, c := range []struct{ name, path, body string }{
		{"the single endpoint", pdp.PathEvaluation, `{` + one + `}`},
		{"the evaluations endpoint without evaluations", pdp.PathEvaluations, `{` + one + `}`},
		{`"evaluations": []`, pdp.PathEvaluations, `{` + one + `,"evaluations":[]}`},
	} {
		code, body := e.authzen(t, tok, c.path, c.body)
		var top map[string]json.RawMessage
		_ = json.Unmarshal(body, &top)
		_, batch := top["evaluations"]
		if code != 200 || batch || !slices.Equal(members(body), group) {
			t.Errorf("%s: %d %s; want a single answer in the group form, members %v", c.name, code, body, group)
		}
	}
	for _, c := range []struct{ name, body string }{
		{"a batch of one item", `{` + one + `,"evaluations":[{}]}`},
		{"a batch cut short at its first item", `{` + one + `,"options":{"evaluations_semantic":"permit_on_first_permit"},"evaluations":[{},{}]}`},
	} {
		code, body := e.authzen(t, tok, pdp.PathEvaluations, c.body)
		var r struct{ Evaluations []json.RawMessage }
		if err := json.Unmarshal(body, &r); code != 200 || err != nil || len(r.Evaluations) != 1 || !slices.Equal(members(r.Evaluations[0]), jws) {
			t.Errorf("%s: %d %s; want one item in the record_jws form, members %v", c.name, code, body, jws)
		}
	}
}
