package decision_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
)

var evalProfile = decision.Profile{Schema: "test.evaluations.v1", Type: "test-evaluations+jwt"}

// signBatch signs n evaluations and returns each answer as a PEP receives
// it, and the evaluation requests.
func signBatch(t *testing.T, s *decision.Signer, n int, at time.Time) ([][]byte, [][]byte, []byte) {
	t.Helper()
	return signBatchWith(t, s.SignEvaluations, n, at)
}

// signBatchWith is signBatch by sign: a signer's, or a group's.
func signBatchWith(t *testing.T, sign func(*decision.EvaluationRecord, []decision.EvaluationLeaf) ([]byte, []decision.EvaluationProof, error), n int, at time.Time) ([][]byte, [][]byte, []byte) {
	t.Helper()
	var leaves []decision.EvaluationLeaf
	var reqs [][]byte
	for i := range n {
		req := []byte(fmt.Sprintf(`{"subject":{"type":"user","id":"u%d"},"action":{"name":"can_read"},"resource":{"type":"doc","id":"d%d"}}`, i, i))
		var m map[string]json.RawMessage
		if err := json.Unmarshal(req, &m); err != nil {
			t.Fatal(err)
		}
		d, err := decision.EvaluationRequestDigest(m)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
		leaves = append(leaves, decision.EvaluationLeaf{Index: i, RequestDigest: d, Decision: i%2 == 0, Reason: fmt.Sprintf("reason_%d", i),
			ContextDigest: decision.EmptyContextDigest, Ignored: []string{}})
	}
	rec := &decision.EvaluationRecord{DecisionID: "d-1", PolicyVersion: "v1", Provenance: decision.Provenance{DecidedAt: at},
		Endpoint: "evaluations", Semantic: "execute_all", Requested: n, RequestID: "req-1",
		Caller: decision.Caller{Authenticated: true, Principal: "system:serviceaccount:todo:backend"}}
	payload, proofs, err := sign(rec, leaves)
	if err != nil {
		t.Error(err)
		return nil, nil, nil
	}
	var answers [][]byte
	for i, p := range proofs {
		b, _ := json.Marshal(map[string]any{"decision": leaves[i].Decision, "context": map[string]any{decision.ContextKey: p}})
		answers = append(answers, b)
	}
	return answers, reqs, payload
}

// TestEvaluationBatchSignedOnce: a batch carries one signature; every item
// verifies on its own against its own request, and only against it.
func TestEvaluationBatchSignedOnce(t *testing.T) {
	s, err := decision.NewSigner(evalProfile, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	keys := s.JWKS()
	for _, n := range []int{1, 2, 3, 10, 100} {
		answers, reqs, payload := signBatch(t, s, n, time.Now())
		if !strings.Contains(string(payload), fmt.Sprintf(`"evaluations":%d`, n)) || !strings.Contains(string(payload), `"principal":"system:serviceaccount:todo:backend"`) {
			t.Fatalf("n=%d: the record does not state the count or the caller: %s", n, payload)
		}
		jws := map[string]bool{}
		for i, a := range answers {
			rec, leaf, err := decision.VerifyEvaluation(a, decision.VerifyOptions{Profile: evalProfile, Keys: keys, Request: reqs[i]})
			if err != nil {
				t.Fatalf("n=%d item %d: %v", n, i, err)
			}
			if leaf.Index != i || leaf.Decision != (i%2 == 0) || rec.Evaluations != n {
				t.Fatalf("n=%d item %d: leaf %+v, record of %d", n, i, leaf, rec.Evaluations)
			}
			var parsed struct {
				Context map[string]decision.EvaluationProof
			}
			_ = json.Unmarshal(a, &parsed)
			jws[parsed.Context[decision.ContextKey].RecordJWS] = true
			if n > 1 {
				other := reqs[(i+1)%n]
				if _, _, err := decision.VerifyEvaluation(a, decision.VerifyOptions{Profile: evalProfile, Keys: keys, Request: other}); !errors.Is(err, decision.ErrRequestMismatch) {
					t.Fatalf("n=%d item %d verified against another item's request: %v", n, i, err)
				}
			}
		}
		if len(jws) != 1 {
			t.Fatalf("n=%d: %d distinct signatures; want one for the batch", n, len(jws))
		}
	}
}

// TestEvaluationTampering: every change to an answer is refused.
func TestEvaluationTampering(t *testing.T) {
	s, _ := decision.NewSigner(evalProfile, newKey(t))
	other, _ := decision.NewSigner(evalProfile, newKey(t))
	wrongTyp, _ := decision.NewSigner(decision.Profile{Schema: evalProfile.Schema, Type: "flex-auth-decision+jwt"}, newKey(t))
	answers, reqs, _ := signBatch(t, s, 5, time.Now())
	foreign, _, _ := signBatch(t, other, 5, time.Now())
	typed, _, _ := signBatch(t, wrongTyp, 5, time.Now())
	old, _, _ := signBatch(t, s, 5, time.Now().Add(-time.Hour))
	opts := decision.VerifyOptions{Profile: evalProfile, Keys: s.JWKS(), Request: reqs[1]}
	mutate := func(f func(m map[string]any, p map[string]any)) []byte {
		var m map[string]any
		_ = json.Unmarshal(answers[1], &m)
		f(m, m["context"].(map[string]any)[decision.ContextKey].(map[string]any))
		b, _ := json.Marshal(m)
		return b
	}
	otherKeys := opts
	otherKeys.Keys = wrongTyp.JWKS()
	for name, c := range map[string]struct {
		answer []byte
		opts   decision.VerifyOptions
		want   error
	}{
		"the decision flipped":            {mutate(func(m, _ map[string]any) { m["decision"] = true }), opts, decision.ErrSignature},
		"the reason changed":              {mutate(func(_, p map[string]any) { p["reason"] = "reason_0" }), opts, decision.ErrSignature},
		"moved to another index":          {mutate(func(_, p map[string]any) { p["index"] = 3 }), opts, decision.ErrSignature},
		"a proof hash dropped":            {mutate(func(_, p map[string]any) { p["proof"] = p["proof"].([]any)[1:] }), opts, decision.ErrSignature},
		"another item's digest":           {mutate(func(_, p map[string]any) { p["request_digest"] = "sha256:00" }), decision.VerifyOptions{Profile: evalProfile, Keys: s.JWKS()}, decision.ErrSignature},
		"no context":                      {[]byte(`{"decision":false}`), opts, decision.ErrUnsigned},
		"a decision that is not a bool":   {[]byte(`{"decision":"true","context":{}}`), opts, decision.ErrUnsigned},
		"an unknown proof member":         {mutate(func(_, p map[string]any) { p["extra"] = 1 }), opts, decision.ErrUnsigned},
		"signed by a key not in the JWKS": {foreign[1], opts, decision.ErrUnknownKey},
		"a /v1/check record's typ":        {typed[1], otherKeys, decision.ErrSignature},
		"an hour old":                     {old[1], opts, decision.ErrStale},
		"a context.error added":           {mutate(func(m, _ map[string]any) { m["context"].(map[string]any)["error"] = map[string]any{"status": 400} }), opts, decision.ErrSignature},
		"a context member added":          {mutate(func(m, _ map[string]any) { m["context"].(map[string]any)["reason"] = "admin" }), opts, decision.ErrSignature},
		"ignored members hidden":          {mutate(func(_, p map[string]any) { p["ignored"] = []string{"subject._note"} }), opts, decision.ErrSignature},
		"another X-Request-ID":            {answers[1], withID(opts, "req-2"), decision.ErrRequestMismatch},
	} {
		if _, _, err := decision.VerifyEvaluation(c.answer, c.opts); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", name, err, c.want)
		}
	}
	if _, _, err := decision.VerifyEvaluation(answers[1], opts); err != nil {
		t.Fatalf("the untouched answer: %v", err)
	}
}

func withID(o decision.VerifyOptions, id string) decision.VerifyOptions {
	o.RequestID = id
	return o
}

// TestVerifyEvaluationsWholeBatch: a whole response verifies against the
// request that asked it, and a response spliced from two answers to the
// same request, cut short, or answered in another order does not.
func TestVerifyEvaluationsWholeBatch(t *testing.T) {
	s, _ := decision.NewSigner(evalProfile, newKey(t))
	const n = 4
	answers, reqs, _ := signBatch(t, s, n, time.Now())
	again, _, _ := signBatch(t, s, n, time.Now())
	request, _ := json.Marshal(map[string]any{"evaluations": rawList(reqs)})
	response := func(list [][]byte) []byte {
		b, _ := json.Marshal(map[string]any{"evaluations": rawList(list)})
		return b
	}
	opts := decision.VerifyOptions{Profile: evalProfile, Keys: s.JWKS()}
	rec, leaves, err := decision.VerifyEvaluations("evaluations", request, response(answers), opts)
	if err != nil || len(leaves) != n || rec.Requested != n {
		t.Fatalf("the whole batch: %v", err)
	}
	spliced := append([][]byte{again[0]}, answers[1:]...)
	for name, c := range map[string]struct {
		endpoint string
		response []byte
	}{
		"an answer from another response":  {"evaluations", response(spliced)},
		"the last answer dropped":          {"evaluations", response(answers[:n-1])},
		"two answers swapped":              {"evaluations", response([][]byte{answers[1], answers[0], answers[2], answers[3]})},
		"the single endpoint's shape":      {"evaluations", answers[0]},
		"asked of the evaluation endpoint": {"evaluation", response(answers)},
	} {
		if _, _, err := decision.VerifyEvaluations(c.endpoint, request, c.response, opts); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func rawList(list [][]byte) []json.RawMessage {
	out := make([]json.RawMessage, len(list))
	for i, b := range list {
		out[i] = b
	}
	return out
}

// TestEvaluationsGroupSigned: requests whose evaluations arrive while a
// signature is being made share the next one (Group.SignEvaluations):
// each answer carries its record, the root's JWS and the record's proof,
// verifies alone and as a whole response, and the record is one of
// several under the root. Every change to the record, either proof or
// the form is refused.
func TestEvaluationsGroupSigned(t *testing.T) {
	s, _ := decision.NewSigner(evalProfile, newKey(t))
	const requests = 6
	var arrived atomic.Int32
	var once sync.Once
	now := func() time.Time { // the first signature waits for every request
		once.Do(func() {
			for arrived.Load() < requests {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		})
		return time.Now()
	}
	var sizes []int
	var mu sync.Mutex
	g := decision.NewGroup(s, 8, now)
	g.Observe = func(k int) { mu.Lock(); sizes = append(sizes, k); mu.Unlock() }
	type signed struct{ answers, reqs [][]byte }
	out := make([]signed, requests)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			arrived.Add(1)
			answers, reqs, _ := signBatchWith(t, g.SignEvaluations, 1+i%3, time.Now())
			out[i] = signed{answers, reqs}
		})
	}
	wg.Wait()
	keys := s.JWKS()
	roots := map[string]bool{}
	for i, o := range out {
		for j, a := range o.answers {
			var parsed struct {
				Context map[string]decision.EvaluationProof
			}
			if err := json.Unmarshal(a, &parsed); err != nil {
				t.Fatal(err)
			}
			p := parsed.Context[decision.ContextKey]
			if p.RecordJWS != "" || p.RootJWS == "" || len(p.Record) == 0 || p.RecordProof == nil {
				t.Fatalf("request %d answer %d is not in the group form: %s", i, j, a)
			}
			roots[p.RootJWS] = true
			if _, _, err := decision.VerifyEvaluation(a, decision.VerifyOptions{Profile: evalProfile, Keys: keys, Request: o.reqs[j]}); err != nil {
				t.Fatalf("request %d answer %d: %v", i, j, err)
			}
		}
		// signBatchWith's records answer the evaluations endpoint.
		response := []byte(`{"evaluations":[` + string(joinAnswers(o.answers)) + `]}`)
		if _, _, err := decision.VerifyEvaluations("evaluations", batchOf(t, o.reqs), response, decision.VerifyOptions{Profile: evalProfile, Keys: keys}); err != nil {
			t.Fatalf("request %d as a whole: %v", i, err)
		}
	}
	// Two answers to the same request, from two records: refused whole.
	spliced := []byte(`{"evaluations":[` + string(joinAnswers([][]byte{out[1].answers[0], out[4].answers[1]})) + `]}`)
	if _, _, err := decision.VerifyEvaluations("evaluations", batchOf(t, out[1].reqs), spliced, decision.VerifyOptions{Profile: evalProfile, Keys: keys}); !errors.Is(err, decision.ErrRequestMismatch) {
		t.Errorf("answers of two group-signed records spliced into one response: %v", err)
	}
	largest := 0
	for _, k := range sizes {
		largest = max(largest, k)
	}
	if largest < 2 || len(roots) != len(sizes) {
		t.Fatalf("groups of %v, %d roots: want several requests' records under one root", sizes, len(roots))
	}

	opts := decision.VerifyOptions{Profile: evalProfile, Keys: keys, Request: out[1].reqs[0]}
	mutate := func(f func(p map[string]any)) []byte {
		var m map[string]any
		_ = json.Unmarshal(out[1].answers[0], &m)
		f(m["context"].(map[string]any)[decision.ContextKey].(map[string]any))
		b, _ := json.Marshal(m)
		return b
	}
	alone, _, _ := signBatch(t, s, 1, time.Now())
	var aloneProof map[string]any
	_ = json.Unmarshal(alone[0], &aloneProof)
	jws := aloneProof["context"].(map[string]any)[decision.ContextKey].(map[string]any)["record_jws"]
	for name, c := range map[string]struct {
		answer []byte
		want   error
	}{
		"the record's decision id changed": {mutate(func(p map[string]any) { p["record"].(map[string]any)["decision_id"] = "d-2" }), decision.ErrSignature},
		"the record moved":                 {mutate(func(p map[string]any) { p["record_proof"].(map[string]any)["index"] = 7 }), decision.ErrSignature},
		"a record proof hash dropped": {mutate(func(p map[string]any) {
			rp := p["record_proof"].(map[string]any)
			if h := rp["hashes"].([]any); len(h) > 0 {
				rp["hashes"] = h[1:]
			} else {
				rp["hashes"] = []any{"AAAA"}
			}
		}), decision.ErrSignature},
		"the root without its record": {mutate(func(p map[string]any) { delete(p, "record") }), decision.ErrUnsigned},
		"both forms":                  {mutate(func(p map[string]any) { p["record_jws"] = jws }), decision.ErrUnsigned},
		"neither form":                {mutate(func(p map[string]any) { delete(p, "root_jws") }), decision.ErrUnsigned},
		"the leaf's decision flipped": {mutate(func(p map[string]any) { p["reason"] = "reason_9" }), decision.ErrSignature},
		"the root signed by another key": {func() []byte {
			other, _ := decision.NewSigner(evalProfile, newKey(t))
			b, _, _ := signBatchWith(t, decision.NewGroup(other, 8, nil).SignEvaluations, 1, time.Now())
			return b[0]
		}(), decision.ErrUnknownKey},
	} {
		if _, _, err := decision.VerifyEvaluation(c.answer, opts); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", name, err, c.want)
		}
	}
}

// batchOf is the evaluations request whose items are reqs.
func batchOf(t *testing.T, reqs [][]byte) []byte {
	t.Helper()
	return []byte(`{"evaluations":[` + string(joinAnswers(reqs)) + `]}`)
}

func joinAnswers(parts [][]byte) []byte {
	var b []byte
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, p...)
	}
	return b
}
