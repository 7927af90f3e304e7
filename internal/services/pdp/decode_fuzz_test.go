package pdp

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/callerauth/callerauth/decision"
)

// FuzzDecodeRequest feeds arbitrary bodies to the check request decoder.
// What it accepts must mean one thing: every string valid UTF-8, and the
// canonical form the record binds decoding back to the very same request.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"system":"s","subject":"a","tenant":"t","lane":"l","resource":"r","stage":"read","fields":["f"],"purpose":""}`,
		`{"system":"s","system":"t","subject":"a","tenant":"t","lane":"l","resource":"r","stage":"read","fields":[],"purpose":"p"}`,
		`{"system":"s","subject":"a","tenant":"t","lane":"l","resource":"r","stage":"read","fields":[null],"purpose":"p"}`,
		`{"system":"\ud800","subject":"a","tenant":"t","lane":"l","resource":"r","stage":"read","fields":["f"],"purpose":"p"}`,
		`[]`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(body)
		if err != nil {
			return
		}
		for _, s := range append([]string{req.System, req.Subject, req.Tenant, req.Lane, req.Resource, req.Stage, req.Purpose}, req.Fields...) {
			if !utf8.ValidString(s) {
				t.Fatalf("accepted a string that is not UTF-8: %q", s)
			}
		}
		canon, err := decision.CanonicalJSON(req)
		if err != nil {
			t.Fatalf("an accepted request has no canonical form: %v", err)
		}
		again, err := decodeRequest(canon)
		if err != nil || !reflect.DeepEqual(again, req) {
			t.Fatalf("the bound form %s reads back as %+v (%v), not %+v", canon, again, err, req)
		}
	})
}

// TestResponseBodyIsTheEncoding: the answer written directly means what
// encoding/json would write for it, and its record is the signed bytes
// exactly (encoding/json would escape <, > and & in it).
func TestResponseBodyIsTheEncoding(t *testing.T) {
	s := &decision.Signed{Record: []byte(`{"a":"é<&>","b":[1,2]}`), RecordJWS: "eyJhbGciOiJFUzI1NiJ9.eyJhIjoxfQ.c2ln-_"}
	var want bytes.Buffer
	_ = json.NewEncoder(&want).Encode(s)
	got := responseBody(s)
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal(want.Bytes(), &b) != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("\n got %s\nwant %s", got, want.Bytes())
	}
	var back decision.Signed
	if err := json.Unmarshal(got, &back); err != nil || !bytes.Equal(back.Record, s.Record) || back.RecordJWS != s.RecordJWS {
		t.Fatalf("the record is not the signed bytes: %s", got)
	}
}

// TestAnswerJSON: the hand-written answer encoding is what encoding/json
// writes for the same answer.
func TestAnswerJSON(t *testing.T) {
	for _, a := range []evaluationAnswer{
		{Decision: true, Context: evaluationAnswerContext{Proof: decision.EvaluationProof{RecordJWS: "eyJ.eyJ.sig", RequestDigest: "sha256:ab", Reason: "r", Ignored: []string{}, Proof: []string{}}}},
		{Decision: false, Context: evaluationAnswerContext{
			Error: &evaluationError{Status: 400, Message: "evaluations[1].resource \"x\" <is> required\u2028é"},
			Proof: decision.EvaluationProof{RecordJWS: "a.b.c", Index: 7, RequestDigest: "sha256:00", Reason: "invalid_evaluation",
				Ignored: []string{"subject._note", "context.\"q\"\\\u0001😀"}, Proof: []string{"h1", "h2"}}}},
		{Decision: true, Context: evaluationAnswerContext{Proof: decision.EvaluationProof{Record: json.RawMessage(`{"decision_id":"d","evaluations":1}`),
			RootJWS: "r.o.ot", RecordProof: &decision.Proof{Index: 2, Hashes: []string{"x1", "x2"}}, RequestDigest: "sha256:ab", Reason: "r", Ignored: []string{}, Proof: []string{}}}},
	} {
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		a.appendJSON(&b)
		var x, y any
		if err := json.Unmarshal(b.Bytes(), &x); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, b.Bytes())
		}
		_ = json.Unmarshal(want, &y)
		if !reflect.DeepEqual(x, y) {
			t.Errorf("\n got %s\nwant %s", b.Bytes(), want)
		}
	}
}
