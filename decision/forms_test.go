package decision

// The worked examples of docs/pdp.md's "Signed forms, worked" section are
// made here, by the signing code itself, from fixed inputs (an Ed25519
// key from a fixed seed: its signatures are deterministic, a fixed clock,
// fixed ids), and the section must be exactly what this writes: a change
// to a signed form that the doc does not follow fails here. Each example
// is also checked by hand — its leaves, paths and roots recomputed with
// crypto/sha256 alone, as RFC 9162 §2.1 says — and verified by
// VerifyEvaluation as a consumer would. UPDATE_DOCS=1 rewrites the
// section.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The profile the pdp signs AuthZEN answers with (pdp.EvaluationProfile;
// TestEvaluationProfileIsTheDocs holds the two together).
var formsProfile = Profile{Schema: "callerauth.authzen-evaluations.v3", Type: "callerauth-authzen+jwt"}

const (
	formsBegin = "<!-- signed-forms-examples: made by decision.TestSignedFormsWorked; UPDATE_DOCS=1 rewrites it -->"
	formsEnd   = "<!-- signed-forms-examples: end -->"
)

var formsAt = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)

func formsSigner(t *testing.T) *Signer {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	s, err := NewSigner(formsProfile, ed25519.NewKeyFromSeed(seed))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// formsRecord is the record of one example request.
func formsRecord(id, endpoint string, requested int) *EvaluationRecord {
	return &EvaluationRecord{DecisionID: id, PolicyVersion: "v1", Endpoint: endpoint, Semantic: "execute_all", Requested: requested,
		RequestID: "req-" + id[len(id)-4:],
		Provenance: Provenance{Evaluator: "cedar-go", Mode: "enforce", PolicyPackageID: "todo", PolicyPackageDigest: "sha256:" + strings.Repeat("1", 64),
			RegistrySnapshotDigest: "sha256:" + strings.Repeat("2", 64), DecidedAt: formsAt},
		Caller: Caller{Authenticated: true, Principal: "system:serviceaccount:todo:todo-backend", Audiences: []string{"flex-auth"}, AuthenticatedBy: "tokenreview"}}
}

// formsItem is an evaluation request and its leaf.
type formsItem struct {
	request string
	allow   bool
	reason  string
	ignored []string
}

func (it formsItem) leaf(t *testing.T, i int) EvaluationLeaf {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(it.request), &m); err != nil {
		t.Fatal(err)
	}
	d, err := EvaluationRequestDigest(m)
	if err != nil {
		t.Fatal(err)
	}
	return EvaluationLeaf{Index: i, RequestDigest: d, Decision: it.allow, Reason: it.reason, ContextDigest: EmptyContextDigest, Ignored: nonNil(it.ignored)}
}

var formsItems = []formsItem{
	{`{"subject":{"type":"user","id":"alice"},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"1"}}`, true, "member_may_read_todos", nil},
	{`{"subject":{"type":"user","id":"alice"},"action":{"name":"can_delete_todo"},"resource":{"type":"todo","id":"1"}}`, false, "no_policy_matched", nil},
	{`{"subject":{"type":"user","id":"alice"},"action":{"name":"can_update_todo"},"resource":{"type":"todo","id":"1"},"context":{"time":"09:00"}}`, false, "no_policy_matched", []string{"context.time"}},
}

// answer is an AuthZEN answer as the pdp writes it (pdp's TestAnswerJSON
// holds its writer to encoding/json's).
func formsAnswer(t *testing.T, allow bool, p EvaluationProof) []byte {
	t.Helper()
	b, err := json.Marshal(struct {
		Decision bool `json:"decision"`
		Context  struct {
			Proof EvaluationProof `json:"callerauth"`
		} `json:"context"`
	}{Decision: allow, Context: struct {
		Proof EvaluationProof `json:"callerauth"`
	}{p}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// byHand recomputes a root from a leaf's bytes and its path with
// crypto/sha256 alone (RFC 9162 §2.1.3.2), writing each step.
func byHand(w *bytes.Buffer, leaf []byte, index, size int, path []string) string {
	h := sha256.Sum256(append([]byte{0}, leaf...))
	fmt.Fprintf(w, "leaf hash  SHA-256(00 ‖ leaf)        = %x\n", h)
	fn, sn := index, size-1
	for _, p := range path {
		sib, _ := base64.RawURLEncoding.DecodeString(p)
		var in []byte
		side := "right"
		if fn%2 == 1 || fn == sn {
			in = append(append([]byte{1}, sib...), h[:]...)
			side = "left"
			for fn%2 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			in = append(append([]byte{1}, h[:]...), sib...)
		}
		h = sha256.Sum256(in)
		fmt.Fprintf(w, "%-5s %s → SHA-256(01 ‖ …)  = %x\n", side, p, h)
		fn >>= 1
		sn >>= 1
	}
	return "sha256:" + hex.EncodeToString(h[:])
}

// formsJSON is an answer as the pdp sends it, byte for byte: one line
// (the group form's record is the canonical JSON its leaf hashes).
func formsJSON(t *testing.T, b []byte) string {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("not JSON: %s", b)
	}
	return string(b)
}

func formsVerify(t *testing.T, s *Signer, answer []byte, request string) {
	t.Helper()
	o := VerifyOptions{Profile: formsProfile, Keys: s.JWKS(), Request: []byte(request), Now: func() time.Time { return formsAt.Add(time.Minute) }}
	if _, _, err := VerifyEvaluation(answer, o); err != nil {
		t.Fatalf("the example does not verify: %v\n%s", err, answer)
	}
}

// TestSignedFormsWorked makes docs/pdp.md's worked examples and holds the
// doc to them.
func TestSignedFormsWorked(t *testing.T) {
	s := formsSigner(t)
	var doc bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&doc, format, a...) }
	jwks, err := json.Marshal(s.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	w("The key every example is signed with (Ed25519, from the seed 00 01 … 1f: an example key, never a real one), as the pdp publishes it at `/.well-known/jwks.json`:\n\n```json\n%s\n```\n\n", jwks)
	w("Every example was decided at `%s` and is verified as of a minute later.\n\n", formsAt.Format(time.RFC3339))

	// 1. A batch of three: one record_jws, a path per item.
	{
		rec := formsRecord("6f1e2d3c-0000-4000-8000-000000000001", "evaluations", 3)
		var leaves []EvaluationLeaf
		for i, it := range formsItems {
			leaves = append(leaves, it.leaf(t, i))
		}
		payload, proofs, err := s.SignEvaluations(rec, leaves)
		if err != nil {
			t.Fatal(err)
		}
		w("#### A batch: `record_jws` and a path per item\n\n")
		w("A request to `/access/v1/evaluations` of three items (here with their defaults applied, as each leaf binds them):\n\n```json\n")
		for _, it := range formsItems {
			w("%s\n", it.request)
		}
		w("```\n\nThe record the JWS signs (its payload, canonical JSON), whose `merkle_root` is the root of the three leaves:\n\n```json\n%s\n```\n\n", payload)
		a2 := formsAnswer(t, formsItems[2].allow, proofs[2])
		formsVerify(t, s, a2, formsItems[2].request)
		for i := range proofs {
			formsVerify(t, s, formsAnswer(t, formsItems[i].allow, proofs[i]), formsItems[i].request)
		}
		w("The answer of item 2, byte for byte as the response's `evaluations[2]` (every item carries the same `record_jws`):\n\n```json\n%s\n```\n\n", formsJSON(t, a2))
		var hand bytes.Buffer
		lb := leaves[2].canonical()
		fmt.Fprintf(&hand, "leaf (canonical JSON) = %s\n", lb)
		root := byHand(&hand, lb, 2, 3, proofs[2].Proof)
		if root != rec.MerkleRoot {
			t.Fatalf("by hand: %s; the record: %s", root, rec.MerkleRoot)
		}
		fmt.Fprintf(&hand, "root = sha256:%s = the record's merkle_root\n", strings.TrimPrefix(root, "sha256:"))
		w("By hand — the leaf is the answer's `decision`, its `context` digested without `callerauth` (`%s`: `{}`), and the proof's `index`, `reason`, `ignored` and `request_digest`; item 2 is the last of a tree of three, so its one sibling is the root of items 0 and 1, on its left (each line after the leaf hash names a hash of the path, whether it is the left or the right sibling, and the node hash that gives):\n\n```\n%s```\n\n", EmptyContextDigest, hand.String())
	}

	// 2. A single evaluation signed alone (--sign-group-max 0): a tree
	// of one leaf, an empty proof.
	{
		rec := formsRecord("6f1e2d3c-0000-4000-8000-000000000002", "evaluation", 1)
		leaves := []EvaluationLeaf{formsItems[0].leaf(t, 0)}
		_, proofs, err := s.SignEvaluations(rec, leaves)
		if err != nil {
			t.Fatal(err)
		}
		a := formsAnswer(t, formsItems[0].allow, proofs[0])
		formsVerify(t, s, a, formsItems[0].request)
		var hand bytes.Buffer
		lb := leaves[0].canonical()
		fmt.Fprintf(&hand, "leaf (canonical JSON) = %s\n", lb)
		root := byHand(&hand, lb, 0, 1, proofs[0].Proof)
		if root != rec.MerkleRoot {
			t.Fatalf("by hand: %s; the record: %s", root, rec.MerkleRoot)
		}
		fmt.Fprintf(&hand, "root = the leaf hash = the record's merkle_root\n")
		w("#### A single evaluation signed alone: `record_jws`, `\"proof\": []`\n\n")
		w("`%s` to `/access/v1/evaluation`, with `--sign-group-max 0`. The answer, byte for byte:\n\n```json\n%s\n```\n\nBy hand — a tree of one leaf is its leaf hash:\n\n```\n%s```\n\n", formsItems[0].request, formsJSON(t, a), hand.String())
	}

	// 3. Single evaluations signed together: record, root_jws and
	// record_proof; here the second of three records under one root.
	{
		var payloads [][]byte
		var first []EvaluationProof
		var firstLeaf EvaluationLeaf
		for i := range 3 {
			rec := formsRecord(fmt.Sprintf("6f1e2d3c-0000-4000-8000-00000000001%d", i), "evaluation", 1)
			leaves := []EvaluationLeaf{formsItems[i].leaf(t, 0)}
			payload, tr, err := s.evaluationRecord(rec, leaves)
			if err != nil {
				t.Fatal(err)
			}
			payloads = append(payloads, payload)
			if i == 1 {
				firstLeaf = leaves[0]
				first = leafProofs(leaves, tr, func(*EvaluationProof) {})
			}
		}
		gs, err := s.signRoot(payloads, formsAt.Add(2*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		p := first[0]
		p.Record, p.RootJWS, p.RecordProof = gs[1].Record, gs[1].RootJWS, &gs[1].Proof
		a := formsAnswer(t, formsItems[1].allow, p)
		formsVerify(t, s, a, formsItems[1].request)
		_, rootPayload, _ := strings.Cut(gs[1].RootJWS, ".")
		rootPayload, _, _ = strings.Cut(rootPayload, ".")
		rp, err := base64.RawURLEncoding.DecodeString(rootPayload)
		if err != nil {
			t.Fatal(err)
		}
		hdr, _, _ := strings.Cut(gs[1].RootJWS, ".")
		hb, _ := base64.RawURLEncoding.DecodeString(hdr)
		var root Root
		if err := json.Unmarshal(rp, &root); err != nil {
			t.Fatal(err)
		}
		var hand bytes.Buffer
		lb := firstLeaf.canonical()
		fmt.Fprintf(&hand, "the answer's own tree, one leaf:\nleaf (canonical JSON) = %s\n", lb)
		own := byHand(&hand, lb, 0, 1, p.Proof)
		var rec EvaluationRecord
		if err := json.Unmarshal(gs[1].Record, &rec); err != nil || own != rec.MerkleRoot {
			t.Fatalf("by hand: %s; the record: %s (%v)", own, rec.MerkleRoot, err)
		}
		fmt.Fprintf(&hand, "= the record's merkle_root\n\nthe root's tree, record 1 of 3 (its leaf is the record's canonical JSON, as the answer carries it):\n")
		top := byHand(&hand, gs[1].Record, 1, 3, gs[1].Proof.Hashes)
		if top != root.MerkleRoot {
			t.Fatalf("by hand: %s; the root: %s", top, root.MerkleRoot)
		}
		fmt.Fprintf(&hand, "= the root's merkle_root\n")
		w("#### Single evaluations signed together: `record`, `root_jws`, `record_proof`\n\n")
		w("`%s` to `/access/v1/evaluation`, signed with two other single evaluations that arrived at the same time (records 0 and 2 under the root). The answer, byte for byte — its `record` is the record's canonical JSON, the text its leaf hashes:\n\n```json\n%s\n```\n\n", formsItems[1].request, formsJSON(t, a))
		w("`root_jws` is a compact JWS whose protected header is `%s` and whose payload (canonical JSON) is:\n\n```json\n%s\n```\n\n", hb, rp)
		w("By hand — first the answer's leaf under its record, then the record under the root (record 1 of 3: its path is record 0 on its left, then record 2 on its right):\n\n```\n%s```\n\n", hand.String())
	}

	// 4. A single evaluation signed alone in the group form (an idle
	// pdp): a root over one record, record_proof {"index":0,"hashes":[]}.
	{
		rec := formsRecord("6f1e2d3c-0000-4000-8000-000000000004", "evaluation", 1)
		leaves := []EvaluationLeaf{formsItems[0].leaf(t, 0)}
		payload, tr, err := s.evaluationRecord(rec, leaves)
		if err != nil {
			t.Fatal(err)
		}
		gs, err := s.signRoot([][]byte{payload}, formsAt.Add(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		p := leafProofs(leaves, tr, func(*EvaluationProof) {})[0]
		p.Record, p.RootJWS, p.RecordProof = gs[0].Record, gs[0].RootJWS, &gs[0].Proof
		a := formsAnswer(t, formsItems[0].allow, p)
		formsVerify(t, s, a, formsItems[0].request)
		if !bytes.Contains(a, []byte(`"record_proof":{"index":0,"hashes":[]}`)) {
			t.Fatalf("a root over one record: %s", a)
		}
		w("#### A single evaluation alone in the group form: `\"record_proof\": {\"index\": 0, \"hashes\": []}`\n\n")
		w("What an idle pdp answers `%s`: a root over one record, whose `merkle_root` is the record's leaf hash, SHA-256(00 ‖ the record's canonical JSON). The answer, byte for byte:\n\n```json\n%s\n```\n", formsItems[0].request, formsJSON(t, a))
	}

	section := formsBegin + "\n\n" + doc.String() + "\n" + formsEnd
	page, err := os.ReadFile("../docs/pdp.md")
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(page, []byte(formsBegin)), bytes.Index(page, []byte(formsEnd))
	if i < 0 || j < i {
		t.Fatalf("docs/pdp.md has no %q … %q section", formsBegin, formsEnd)
	}
	have := string(page[i : j+len(formsEnd)])
	if have == section {
		return
	}
	if os.Getenv("UPDATE_DOCS") == "1" {
		out := append(append(append([]byte{}, page[:i]...), section...), page[j+len(formsEnd):]...)
		if err := os.WriteFile("../docs/pdp.md", out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/pdp.md's worked examples are not what the signing code makes (UPDATE_DOCS=1 go test -run TestSignedFormsWorked ./decision rewrites them); want:\n%s", section)
}

// TestSignedFormsRefused: what docs/pdp.md's "The signed forms, exactly"
// refuses is refused. The form is told by the members present (an empty
// record_jws beside the group's members is both forms; a record_proof
// alone is part of one); a merkle_root in upper-case hex is not the
// signer's; a root signed before its record was decided, or too long
// ago, is stale. On ae46db4 an empty record_jws passed as absent and
// signed_at was never read.
func TestSignedFormsRefused(t *testing.T) {
	s := formsSigner(t)
	item := formsItems[0]
	rec := formsRecord("6f1e2d3c-0000-4000-8000-000000000021", "evaluation", 1)
	leaves := []EvaluationLeaf{item.leaf(t, 0)}
	payload, tr, err := s.evaluationRecord(rec, leaves)
	if err != nil {
		t.Fatal(err)
	}
	grouped := func(root Root) []byte {
		t.Helper()
		rp, err := root.canonical()
		if err != nil {
			t.Fatal(err)
		}
		compact, err := s.sign(s.rootHeader, rp)
		if err != nil {
			t.Fatal(err)
		}
		p := leafProofs(leaves, tr, func(*EvaluationProof) {})[0]
		p.Record, p.RootJWS, p.RecordProof = payload, compact, &Proof{Index: 0, Hashes: []string{}}
		return formsAnswer(t, item.allow, p)
	}
	lh := leafHash(payload)
	good := Root{Schema: s.rootSchema, MerkleRoot: digestString(lh), Records: 1, SignedAt: formsAt.Add(time.Millisecond)}
	verify := func(answer []byte) error {
		_, _, err := VerifyEvaluation(answer, VerifyOptions{Profile: formsProfile, Keys: s.JWKS(), Request: []byte(item.request), Now: func() time.Time { return formsAt.Add(time.Minute) }})
		return err
	}
	if err := verify(grouped(good)); err != nil {
		t.Fatalf("the good answer: %v", err)
	}
	edit := func(answer []byte, f func(m map[string]any)) []byte {
		var a map[string]any
		if err := json.Unmarshal(answer, &a); err != nil {
			t.Fatal(err)
		}
		f(a["context"].(map[string]any)["callerauth"].(map[string]any))
		b, _ := json.Marshal(a)
		return b
	}
	upper := good
	upper.MerkleRoot = "sha256:" + strings.ToUpper(hex.EncodeToString(lh[:]))
	early, stale := good, good
	early.SignedAt = formsAt.Add(-time.Minute) // before the record was decided
	stale.SignedAt = formsAt.Add(-time.Hour)
	for name, c := range map[string]struct {
		answer []byte
		want   string
	}{
		"an empty record_jws beside the group form": {edit(grouped(good), func(m map[string]any) { m["record_jws"] = "" }), "both forms"},
		"a null record_jws beside the group form":   {edit(grouped(good), func(m map[string]any) { m["record_jws"] = nil }), "null"},
		"the group form without record_proof":       {edit(grouped(good), func(m map[string]any) { delete(m, "record_proof") }), "not all of record, root_jws and record_proof"},
		"record and record_proof without root_jws":  {edit(grouped(good), func(m map[string]any) { delete(m, "root_jws") }), "not all of record, root_jws and record_proof"},
		"neither form":                                {edit(grouped(good), func(m map[string]any) { delete(m, "root_jws"); delete(m, "record"); delete(m, "record_proof") }), "neither"},
		"a merkle_root in upper-case hex":             {grouped(upper), "lower-case"},
		"a root signed before its record was decided": {grouped(early), "after its root was signed"},
		"a root signed an hour ago":                   {grouped(stale), "signed_at"},
	} {
		if err := verify(c.answer); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want it refused, %q", name, err, c.want)
		}
	}
}
