package pdp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// certCase is one test of the AuthZEN 1.0 certification scenario
// (certification/authorization-api-1_0-scenario.md in openid/authzen),
// named by its section id there.
type certCase struct {
	id, path, body string
	contentType    string // default application/json
	status         int    // default 200
	// decisions, for an evaluation: the decision values the scenario
	// validates (nil: structure only; one value for a single answer).
	decisions []bool
	// count: the answers an evaluations response must hold (0: as many as
	// decisions).
	count int
	// itemError: the answer index that must carry context.error.
	itemError int
	// results, for a search: what the results must include; empty: must be
	// empty when emptyResults.
	results      []string
	emptyResults bool
}

// TestAuthZENCertification runs every test of the certification
// scenario's Basic, Batch and Search levels (Core and Properties) and the
// transport requirements against the real pdp over HTTPS, serving
// examples/authzen-certification: each response's status, Content-Type,
// X-Request-ID echo, shape and — where the scenario validates them —
// decisions and results, every 200 answer verified against its request.
// The Discovery level is TestAuthZENCertificationDiscovery.
func TestAuthZENCertification(t *testing.T) {
	p, tok, keys := authzenCaller(t, "../../examples/authzen-certification", "authzen-certification")
	const (
		ev  = pdp.PathEvaluation
		evs = pdp.PathEvaluations
		ss  = pdp.PathSearchSubject
		sr  = pdp.PathSearchResource
		sa  = pdp.PathSearchAction
	)
	ctx := `"context":{"time":"2025-06-27T18:03-07:00","ip":"192.168.1.1"}`
	cases := []certCase{
		// Basic: the Access Evaluation API.
		{id: "c-2-2-1", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, decisions: []bool{true}},
		{id: "c-2-2-2", path: ev, body: `{"subject":{"type":"user","id":"bob"},"action":{"name":"write"},"resource":{"type":"record","id":"record-1"}}`, decisions: []bool{false}},
		{id: "c-2-2-3", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"},` + ctx + `}`, decisions: []bool{true}},
		{id: "c-2-2-4", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"write"},"resource":{"type":"record","id":"record-2","properties":{"status":"archived"}}}`, decisions: []bool{false}},
		{id: "c-2-2-5", path: ev, body: `{"subject":{"type":"user","id":"bob","properties":{"role":"admin"}},"action":{"name":"write"},"resource":{"type":"record","id":"record-2","properties":{"status":"archived"}}}`, decisions: []bool{true}},
		{id: "c-2-2-6", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"delete","properties":{"soft":true}},"resource":{"type":"record","id":"record-1"}}`, decisions: []bool{true}},
		{id: "c-2-2-7", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"delete","properties":{"soft":false}},"resource":{"type":"record","id":"record-1"}}`, decisions: []bool{false}},
		{id: "c-2-2-8", path: ev, body: `{"subject":{"type":"user","id":"alice","properties":{"department":"Sales","role":"manager"}},"action":{"name":"read","properties":{"method":"GET"}},"resource":{"type":"record","id":"record-1","properties":{"status":"active","owner":"bob"}}}`, decisions: []bool{true}},
		{id: "c-2-2-9", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"},"foo":"bar","futureField":{"nested":true}}`, decisions: []bool{true}},
		{id: "c-2-4-1 subject", path: ev, body: `{"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, status: 400},
		{id: "c-2-4-1 action", path: ev, body: `{"subject":{"type":"user","id":"alice"},"resource":{"type":"record","id":"record-1"}}`, status: 400},
		{id: "c-2-4-1 resource", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"}}`, status: 400},
		{id: "c-2-4-2 subject.type", path: ev, body: `{"subject":{"id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, status: 400},
		{id: "c-2-4-2 subject.id", path: ev, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, status: 400},
		{id: "c-2-4-2 action.name", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{},"resource":{"type":"record","id":"record-1"}}`, status: 400},
		{id: "c-2-4-2 resource.type", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"id":"record-1"}}`, status: 400},
		{id: "c-2-4-2 resource.id", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record"}}`, status: 400},
		{id: "c-2-4-3", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, contentType: "text/plain", status: 400},
		{id: "c-2-4-4", path: ev, body: `{"subject":{"type":"user","id":"alice"},`, status: 400},
		{id: "c-2-4-5", path: ev, body: ``, status: 400},
		{id: "c-2-4-6 subject", path: ev, body: `{"subject":"alice","action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, status: 400},
		{id: "c-2-4-6 action.name", path: ev, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":123},"resource":{"type":"record","id":"record-1"}}`, status: 400},

		// Batch: the Access Evaluations API.
		{id: "c-3-2-1", path: evs, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"record","id":"record-1"}},{"resource":{"type":"record","id":"record-2"}}]}`, count: 2},
		{id: "c-3-2-2", path: evs, body: `{"subject":{"type":"user","id":"bob"},"resource":{"type":"record","id":"record-1"},"evaluations":[{"action":{"name":"read"}},{"action":{"name":"write"}}]}`, decisions: []bool{true, false}},
		{id: "c-3-2-3", path: evs, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"write"},"evaluations":[{"resource":{"type":"record","id":"record-1","properties":{"status":"active"}}},{"resource":{"type":"record","id":"record-2","properties":{"status":"archived"}}}]}`, decisions: []bool{true, false}},
		{id: "c-3-2-4", path: evs, body: `{"action":{"name":"write"},"resource":{"type":"record","id":"record-2","properties":{"status":"archived"}},"evaluations":[{"subject":{"type":"user","id":"alice"}},{"subject":{"type":"user","id":"bob","properties":{"role":"admin"}}}]}`, decisions: []bool{false, true}},
		{id: "c-3-2-5", path: evs, body: `{"evaluations":[{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}},{"subject":{"type":"user","id":"bob"},"action":{"name":"write"},"resource":{"type":"record","id":"record-1"}}]}`, decisions: []bool{true, false}},
		{id: "c-3-2-6", path: evs, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"context":{"time":"2025-06-27T18:03-07:00"},"evaluations":[{"resource":{"type":"record","id":"record-1"}},{"resource":{"type":"record","id":"record-2"},"context":{"time":"2025-06-27T19:00-07:00","source":"batch-override"}}]}`, count: 2},
		{id: "c-3-2-7", path: evs, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"write"},"resource":{"type":"record","id":"record-1","properties":{"status":"active"}},"evaluations":[{},{"resource":{"type":"record","id":"record-2","properties":{"status":"archived"}}}]}`, decisions: []bool{true, false}},
		{id: "c-3-4-1", path: evs, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"options":{"evaluations_semantic":"execute_all"},"evaluations":[{"resource":{"type":"record","id":"record-1"}},{}]}`, decisions: []bool{true, false}, itemError: 2},
		{id: "c-3-4-2", path: evs, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, decisions: []bool{true}},
		{id: "c-3-4-3", path: evs, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"},"evaluations":[]}`, decisions: []bool{true}},

		// Search.
		{id: "c-4-2-1", path: ss, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, results: []string{"user/alice", "user/bob"}},
		{id: "c-4-2-2", path: ss, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"},` + ctx + `}`, results: []string{"user/alice", "user/bob"}},
		{id: "c-4-2-3", path: ss, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, results: []string{"user/alice", "user/bob"}},
		{id: "c-4-2-4", path: ss, body: `{"subject":{"type":"user"},"action":{"name":"write"},"resource":{"type":"record","id":"record-2","properties":{"status":"archived"}}}`, results: []string{"user/bob"}},
		{id: "c-4-3-1", path: sr, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record"}}`, results: []string{"record/record-1"}},
		{id: "c-4-3-2", path: sr, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record"},` + ctx + `}`, results: []string{"record/record-1"}},
		{id: "c-4-3-3", path: sr, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, results: []string{"record/record-1", "record/record-2"}},
		{id: "c-4-3-4", path: sr, body: `{"subject":{"type":"user","id":"bob","properties":{"role":"admin"}},"action":{"name":"write"},"resource":{"type":"record"}}`, results: []string{"record/record-2"}},
		{id: "c-4-4-1", path: sa, body: `{"subject":{"type":"user","id":"alice"},"resource":{"type":"record","id":"record-1"}}`, results: []string{"read", "write"}},
		{id: "c-4-4-2", path: sa, body: `{"subject":{"type":"user","id":"alice"},"resource":{"type":"record","id":"record-1"},` + ctx + `}`, results: []string{"read", "write"}},
		{id: "c-4-4-3", path: sa, body: `{"subject":{"type":"user","id":"bob","properties":{"role":"admin"}},"resource":{"type":"record","id":"record-2","properties":{"status":"archived"}}}`, results: []string{"write"}},
		{id: "c-4-5-1", path: ss, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"},"page":{"limit":1}}`, results: []string{"user/alice"}},
		{id: "c-4-6-1", path: sa, body: `{"subject":{"type":"user","id":"nonexistent-user"},"resource":{"type":"record","id":"record-1"}}`, emptyResults: true},
		{id: "c-4-6-2", path: ss, body: `{"subject":{"type":"spaceship"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, emptyResults: true},
		{id: "c-4-6-1 subject search", path: ss, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"no-such-record"}}`, emptyResults: true},
		{id: "c-4-6-2 resource search", path: sr, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"spaceship"}}`, emptyResults: true},
		{id: "c-4-6-2 action search", path: sa, body: `{"subject":{"type":"spaceship","id":"x"},"resource":{"type":"record","id":"record-1"}}`, emptyResults: true},
		{id: "c-4-7-1 subject search", path: ss, body: `{"subject":{"type":"user"},"resource":{"type":"record","id":"record-1"}}`, status: 400},
		{id: "c-4-7-1 resource search", path: sr, body: `{"action":{"name":"read"},"resource":{"type":"record"}}`, status: 400},
		{id: "c-4-7-1 action search", path: sa, body: `{"subject":{"type":"user","id":"alice"}}`, status: 400},
		{id: "c-4-7-2 subject search", path: ss, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record"}}`, status: 400},
		{id: "c-4-7-2 resource search", path: sr, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record"}}`, status: 400},
		{id: "c-4-7-2 action search", path: sa, body: `{"subject":{"type":"user"},"resource":{"type":"record","id":"record-1"}}`, status: 400},
	}
	passed := 0
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			if c.contentType == "" {
				c.contentType = "application/json"
			}
			if c.status == 0 {
				c.status = 200
			}
			code, h, resp := certPost(t, p, tok, c.path, c.body, c.contentType, "req-"+c.id)
			if code != c.status {
				t.Fatalf("%d %s; want %d", code, resp, c.status)
			}
			// c-2-3, c-5: JSON on success, and the X-Request-ID echoed (c-2-5-1).
			if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
			if h.Get(pdp.HeaderRequestID) != "req-"+c.id {
				t.Errorf("X-Request-ID %q not echoed", h.Get(pdp.HeaderRequestID))
			}
			if c.status != 200 {
				passed++
				return
			}
			if _, ok := searchKindOf(c.path); ok {
				checkSearch(t, c, resp, keys)
			} else {
				checkEvaluations(t, c, resp, keys)
			}
			if !t.Failed() {
				passed++
			}
		})
	}

	// c-2-5-2: no X-Request-ID, no failure. c-2-6: the same decision each time.
	for i := range 3 {
		code, h, resp := certPost(t, p, tok, ev, cases[0].body, "application/json", "")
		var a struct{ Decision *bool }
		_ = json.Unmarshal(resp, &a)
		if code != 200 || a.Decision == nil || !*a.Decision || h.Get(pdp.HeaderRequestID) != "" {
			t.Errorf("c-2-5-2/c-2-6, request %d: %d %s", i, code, resp)
		}
	}

	// c-4-5-2: the token of c-4-5-1's page gives the next, to the end.
	all := searchAll(t, p, tok, ss, json.RawMessage(`{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`), 1, keys)
	if !sameSet(all, []json.RawMessage{json.RawMessage(`{"type":"user","id":"alice"}`), json.RawMessage(`{"type":"user","id":"bob"}`)}) {
		t.Errorf("c-4-5-2: one result a page gave %s", all)
	}
	t.Logf("certification scenario: %d of %d tests pass, plus c-2-5-2, c-2-6 and c-4-5-2", passed, len(cases))
}

func searchKindOf(path string) (string, bool) {
	switch path {
	case pdp.PathSearchSubject, pdp.PathSearchResource, pdp.PathSearchAction:
		return strings.TrimPrefix(path, "/access/v1/search/"), true
	}
	return "", false
}

func certPost(t *testing.T, p *pdpProc, tok, path, body, contentType, requestID string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.url+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+tok)
	if requestID != "" {
		req.Header.Set(pdp.HeaderRequestID, requestID)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// checkEvaluations checks an evaluation response's shape (c-2-3, c-3-3),
// the decisions the scenario validates, and the signature over the whole
// response.
func checkEvaluations(t *testing.T, c certCase, resp []byte, keys jose.JSONWebKeySet) {
	t.Helper()
	endpoint := strings.TrimPrefix(c.path, "/access/v1/")
	_, leaves, err := decision.VerifyEvaluations(endpoint, []byte(c.body), resp, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys, RequestID: "req-" + c.id})
	if err != nil {
		t.Fatalf("the response does not verify against its request: %v\n%s", err, resp)
	}
	var single struct {
		Decision *bool          `json:"decision"`
		Context  map[string]any `json:"context"`
	}
	var batch struct {
		Evaluations []struct {
			Decision *bool          `json:"decision"`
			Context  map[string]any `json:"context"`
		} `json:"evaluations"`
	}
	_ = json.Unmarshal(resp, &batch)
	_ = json.Unmarshal(resp, &single)
	var got []bool
	if batch.Evaluations != nil {
		if single.Decision != nil {
			t.Error("c-3-3-4: a top-level decision beside evaluations")
		}
		for i, e := range batch.Evaluations {
			if e.Decision == nil {
				t.Fatalf("c-3-3-3: evaluation %d has no boolean decision: %s", i, resp)
			}
			if _, hasErr := e.Context["error"]; hasErr != (c.itemError == i+1) {
				t.Errorf("evaluation %d: context.error present %t", i, hasErr)
			}
			got = append(got, *e.Decision)
		}
	} else {
		if single.Decision == nil {
			t.Fatalf("c-2-3-1: no boolean decision: %s", resp)
		}
		got = []bool{*single.Decision}
	}
	want := c.count
	if want == 0 {
		want = len(c.decisions)
	}
	if len(got) != want || len(leaves) != want {
		t.Fatalf("c-3-3-1: %d answers (%d leaves); want %d", len(got), len(leaves), want)
	}
	if c.decisions != nil && !slices.Equal(got, c.decisions) {
		t.Errorf("decisions %v; want %v (reasons %v)", got, c.decisions, reasonsOf(leaves))
	}
}

func reasonsOf(leaves []decision.EvaluationLeaf) []string {
	out := make([]string, len(leaves))
	for i, l := range leaves {
		out[i] = l.Reason
	}
	return out
}

// checkSearch checks a search page's shape (c-4-2-1's list), the results
// the scenario requires, and the page's signature.
func checkSearch(t *testing.T, c certCase, resp []byte, keys jose.JSONWebKeySet) {
	t.Helper()
	kind, _ := searchKindOf(c.path)
	if _, err := decision.VerifySearch("search/"+kind, []byte(c.body), resp, decision.VerifyOptions{Profile: pdp.SearchProfile, Keys: keys, RequestID: "req-" + c.id}); err != nil {
		t.Fatalf("the page does not verify: %v\n%s", err, resp)
	}
	var a struct {
		Page *struct {
			NextToken *string `json:"next_token"`
		} `json:"page"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(resp, &a); err != nil || a.Results == nil {
		t.Fatalf("results is not an array: %s", resp)
	}
	if a.Page != nil && a.Page.NextToken == nil {
		t.Errorf("c-4-5-3: a page without next_token: %s", resp)
	}
	var got []string
	for _, r := range a.Results {
		if kind == "action" {
			name, ok := r["name"].(string)
			if !ok || len(r) != 1 {
				t.Errorf("an action result that is not {name}: %v", r)
			}
			got = append(got, name)
			continue
		}
		typ, ok1 := r["type"].(string)
		id, ok2 := r["id"].(string)
		if !ok1 || !ok2 {
			t.Errorf("a result without type and id: %v", r)
		}
		var m map[string]any
		_ = json.Unmarshal([]byte(c.body), &m)
		if want := m[kind].(map[string]any)["type"]; typ != want {
			t.Errorf("a result of type %q; the search asked %q", typ, want)
		}
		got = append(got, typ+"/"+id)
	}
	if c.emptyResults && len(got) != 0 {
		t.Errorf("results %v; want none", got)
	}
	for _, w := range c.results {
		if !slices.Contains(got, w) {
			t.Errorf("results %v lack %s", got, w)
		}
	}
}

// TestAuthZENCertificationDiscovery runs the scenario's Discovery level
// (c-6): the metadata at the well-known URI derived from the PDP's base
// URL names that base URL and HTTPS endpoints for every API, its
// signed_metadata verifies against jwks_uri with an iss and the same
// values, and the tenant-suffixed document names endpoints the pdp serves.
func TestAuthZENCertificationDiscovery(t *testing.T) {
	p, tok, _ := authzenCaller(t, "../../examples/authzen-certification", "authzen-certification")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "https://"))
	base := "https://localhost:" + port // the serving certificate's first name
	for _, c := range []struct{ doc, id string }{
		{base + pdp.PathAuthZENConfig, base},
		{base + pdp.PathAuthZENConfig + "/authzen-certification", base + "/authzen-certification"},
	} {
		resp, err := p.client.Get(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || resp.Header.Get("Cache-Control") == "" {
			t.Fatalf("c-6-2 %s: %d %q %q %s", c.doc, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"), body)
		}
		var meta map[string]any
		if err := json.Unmarshal(body, &meta); err != nil {
			t.Fatal(err)
		}
		if meta["policy_decision_point"] != c.id {
			t.Errorf("c-6-5: policy_decision_point %v; the document was fetched for %s", meta["policy_decision_point"], c.id)
		}
		for _, k := range []string{"access_evaluation_endpoint", "access_evaluations_endpoint", "search_subject_endpoint", "search_resource_endpoint", "search_action_endpoint", "jwks_uri"} {
			if s, _ := meta[k].(string); !strings.HasPrefix(s, "https://") {
				t.Errorf("c-6-5: %s %v is not an https URL", k, meta[k])
			}
		}
		if _, ok := meta["capabilities"]; ok {
			t.Error("capabilities published, though no capability URN is registered")
		}
		// signed_metadata: a JWT signed by a key of jwks_uri, with iss and
		// the same values.
		jr, err := p.client.Get(meta["jwks_uri"].(string))
		if err != nil {
			t.Fatal(err)
		}
		var keys jose.JSONWebKeySet
		_ = json.NewDecoder(jr.Body).Decode(&keys)
		jr.Body.Close()
		jws, err := jose.ParseSignedCompact(meta["signed_metadata"].(string), decision.Algorithms)
		if err != nil {
			t.Fatalf("signed_metadata: %v", err)
		}
		k := keys.Key(jws.Signatures[0].Header.KeyID)
		if len(k) != 1 {
			t.Fatalf("signed_metadata's kid %q is not in jwks_uri", jws.Signatures[0].Header.KeyID)
		}
		payload, err := jws.Verify(k[0].Key)
		if err != nil {
			t.Fatalf("signed_metadata does not verify: %v", err)
		}
		var claims map[string]any
		_ = json.Unmarshal(payload, &claims)
		if claims["iss"] != c.id {
			t.Errorf("signed_metadata iss %v; want %s", claims["iss"], c.id)
		}
		if _, nested := claims["signed_metadata"]; nested {
			t.Error("signed_metadata inside signed_metadata")
		}
		for k, v := range meta {
			if k != "signed_metadata" && claims[k] != v {
				t.Errorf("signed_metadata says %s = %v, the document %v", k, claims[k], v)
			}
		}
		// The endpoint the document names is served.
		path := strings.TrimPrefix(meta["access_evaluation_endpoint"].(string), base)
		code, _, resp2 := certPost(t, p, tok, path, `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"}}`, "application/json", "")
		if code != 200 || !strings.Contains(string(resp2), `"decision":true`) {
			t.Errorf("%s: %d %s", path, code, resp2)
		}
	}
	// Another tenant has no document and no endpoints.
	resp, err := p.client.Get(base + pdp.PathAuthZENConfig + "/someone-else")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	code, _, _ := certPost(t, p, tok, "/someone-else"+pdp.PathEvaluation, `{}`, "application/json", "")
	if resp.StatusCode != 404 || code != 404 {
		t.Errorf("another tenant: metadata %d, evaluation %d; want 404", resp.StatusCode, code)
	}
}
