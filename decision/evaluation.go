package decision

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// ContextKey is the member of an AuthZEN answer's context that carries its
// signature and inclusion proof.
const ContextKey = "callerauth"

// EvaluationRecord is the signed record of AuthZEN evaluations: one
// evaluation, or a whole batch signed once. It binds every evaluation
// through the root of a Merkle tree (RFC 9162, section 2.1) whose leaves
// are the [EvaluationLeaf]s, in request order; each answer carries the
// record's JWS and its leaf's inclusion proof, so that one answer can be
// verified on its own. Beside the tree it binds what the request as a
// whole asked: the endpoint, the evaluations semantic, how many
// evaluations were requested (a short-circuiting semantic answers fewer),
// the request's X-Request-ID and the members the PDP ignored.
type EvaluationRecord struct {
	Schema        string     `json:"schema"`
	DecisionID    string     `json:"decision_id"`
	PolicyVersion string     `json:"policy_version"`
	Endpoint      string     `json:"endpoint"`    // "evaluation" or "evaluations"
	Semantic      string     `json:"semantic"`    // execute_all, deny_on_first_deny, permit_on_first_permit
	Requested     int        `json:"requested"`   // evaluations the request asked for
	Evaluations   int        `json:"evaluations"` // leaves in the tree: evaluations answered
	RequestID     string     `json:"request_id"`  // the X-Request-ID header; "" when none was sent
	Ignored       []string   `json:"ignored"`     // request-level members the PDP did not interpret
	MerkleRoot    string     `json:"merkle_root"` // "sha256:" + hex
	Provenance    Provenance `json:"provenance"`
	Caller        Caller     `json:"caller"`
}

// EvaluationLeaf is one evaluation as its leaf binds it: its position in
// the request, the digest of the evaluation request it decided (subject,
// action, resource and context after the batch's defaults are applied,
// RFC 8785 canonical JSON), the decision, the reason, the digest of
// everything else the answer's context says (its error, any member but
// the proof itself), and the members of the evaluation the PDP ignored
// (by path, such as subject.properties.nickname): a consumer sees what did
// not count.
type EvaluationLeaf struct {
	Index         int      `json:"index"`
	RequestDigest string   `json:"request_digest"`
	Decision      bool     `json:"decision"`
	Reason        string   `json:"reason"`
	ContextDigest string   `json:"context_digest"`
	Ignored       []string `json:"ignored"`
}

// EvaluationProof is what an answer's context carries under [ContextKey]:
// the record's JWS, or — group-signed ([Group.SignEvaluations]) — the
// record itself, the JWS of the root that signed it with others and its
// proof in that root's tree; then the answer's leaf and its proof in the
// record's tree.
type EvaluationProof struct {
	RecordJWS string `json:"record_jws,omitempty"`
	// Record, RootJWS and RecordProof are the group-signed form's.
	Record        json.RawMessage `json:"record,omitempty"`
	RootJWS       string          `json:"root_jws,omitempty"`
	RecordProof   *Proof          `json:"record_proof,omitempty"`
	Index         int             `json:"index"`
	RequestDigest string          `json:"request_digest"`
	Reason        string          `json:"reason"`
	Ignored       []string        `json:"ignored"`
	Proof         []string        `json:"proof"` // base64url SHA-256 hashes, leaf to root
}

// EmptyContextDigest is the context digest of an answer whose context
// carries nothing but its proof.
var EmptyContextDigest = func() string { d, _ := Digest([]byte("{}")); return d }()

// ContextDigest is the digest a leaf binds for an answer's context: the
// RFC 8785 canonical JSON of its members other than [ContextKey].
func ContextDigest(context map[string]json.RawMessage) (string, error) {
	if len(context) == 0 || (len(context) == 1 && context[ContextKey] != nil) {
		return EmptyContextDigest, nil
	}
	rest := make(map[string]json.RawMessage, len(context))
	for k, v := range context {
		if k != ContextKey {
			rest[k] = v
		}
	}
	b, err := json.Marshal(rest)
	if err != nil {
		return "", err
	}
	return Digest(b)
}

// canonical is the leaf's RFC 8785 canonical JSON, written directly: the
// members in their sorted order, the strings escaped as RFC 8785 says. It
// equals CanonicalJSON(l) (TestLeafCanonical) without its reflective round
// trip, once per evaluation.
func (l EvaluationLeaf) canonical() []byte {
	var b bytes.Buffer
	b.Grow(160 + len(l.Reason) + len(l.RequestDigest))
	b.WriteString(`{"context_digest":`)
	writeString(&b, l.ContextDigest)
	b.WriteString(`,"decision":`)
	b.WriteString(strconv.FormatBool(l.Decision))
	b.WriteString(`,"ignored":`)
	writeStrings(&b, l.Ignored)
	b.WriteString(`,"index":`)
	b.WriteString(strconv.Itoa(l.Index))
	b.WriteString(`,"reason":`)
	writeString(&b, l.Reason)
	b.WriteString(`,"request_digest":`)
	writeString(&b, l.RequestDigest)
	b.WriteByte('}')
	return b.Bytes()
}

// writeStrings writes a JSON array of strings, canonical; nil is [].
func writeStrings(b *bytes.Buffer, list []string) {
	b.WriteByte('[')
	for i, s := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, s)
	}
	b.WriteByte(']')
}

// SignEvaluations signs a batch of evaluations once: it completes the
// record (schema, count, Merkle root), signs it and returns the record's
// canonical JSON and, for each leaf, the proof its answer carries.
func (s *Signer) SignEvaluations(r *EvaluationRecord, leaves []EvaluationLeaf) ([]byte, []EvaluationProof, error) {
	payload, t, err := s.evaluationRecord(r, leaves)
	if err != nil {
		return nil, nil, err
	}
	compact, err := s.compact(payload)
	if err != nil {
		return nil, nil, err
	}
	return payload, leafProofs(leaves, t, func(p *EvaluationProof) { p.RecordJWS = compact }), nil
}

// SignEvaluations signs a request's evaluations as [Signer.SignEvaluations]
// does, but with whatever records of other requests are waiting with it:
// one signature over the root of their records (group-commit signing, as
// [Group.Sign] shares /v1/check's). Each answer carries the record itself,
// the root's JWS and the record's proof in the root's tree beside its own
// leaf proof: it verifies alone, in O(log n) for either tree.
func (g *Group) SignEvaluations(r *EvaluationRecord, leaves []EvaluationLeaf) ([]byte, []EvaluationProof, error) {
	payload, t, err := g.signer.evaluationRecord(r, leaves)
	if err != nil {
		return nil, nil, err
	}
	gs, err := g.sign(payload, nil)
	if err != nil {
		return nil, nil, err
	}
	return payload, leafProofs(leaves, t, func(p *EvaluationProof) {
		p.Record, p.RootJWS, p.RecordProof = gs.Record, gs.RootJWS, &gs.Proof
	}), nil
}

// evaluationRecord completes r over leaves (schema, count, the Merkle root
// of the leaves) and returns its canonical JSON and the leaves' tree.
func (s *Signer) evaluationRecord(r *EvaluationRecord, leaves []EvaluationLeaf) ([]byte, *tree, error) {
	if len(leaves) == 0 {
		return nil, nil, errors.New("decision: no evaluation to sign")
	}
	hashes := make([][sha256.Size]byte, len(leaves))
	for i, l := range leaves {
		if l.Index != i {
			return nil, nil, fmt.Errorf("decision: leaf %d has index %d", i, l.Index)
		}
		hashes[i] = leafHash(l.canonical())
	}
	t := newTree(hashes)
	root := t.hash(0, len(hashes))
	r.Schema = s.profile.Schema
	r.Evaluations = len(leaves)
	if r.Requested < r.Evaluations {
		return nil, nil, fmt.Errorf("decision: %d evaluations answered of %d requested", r.Evaluations, r.Requested)
	}
	r.Ignored = nonNil(r.Ignored)
	r.MerkleRoot = digestString(root)
	payload, err := r.canonical()
	if err != nil {
		return nil, nil, err
	}
	return payload, t, nil
}

// leafProofs are the proofs the leaves' answers carry, each completed by
// signed (the record's JWS, or the group's record, root and proof).
func leafProofs(leaves []EvaluationLeaf, t *tree, signed func(*EvaluationProof)) []EvaluationProof {
	proofs := make([]EvaluationProof, len(leaves))
	for i, l := range leaves {
		path := t.proof(i, 0, len(leaves))
		p := EvaluationProof{Index: i, RequestDigest: l.RequestDigest, Reason: l.Reason, Ignored: nonNil(l.Ignored), Proof: make([]string, len(path))}
		for j, h := range path {
			p.Proof[j] = base64url(h[:])
		}
		signed(&p)
		proofs[i] = p
	}
	return proofs
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// EvaluationMembers are the members of an evaluation request a leaf binds,
// in their canonical order.
var EvaluationMembers = []string{"action", "context", "resource", "subject"}

// EvaluationRequestDigest is the request_digest a leaf binds: of members
// (an evaluation's own, or a batch's defaults where it has none), the
// subject, action, resource and context present, each digested on its own
// (MemberDigest), and the SHA-256 of the RFC 8785 canonical JSON of the
// object of those digests, e.g. {"action":"sha256:…","resource":"sha256:…",
// "subject":"sha256:…"}. A member is hashed once however many evaluations
// of a batch share it: an item costs its own members, not its defaults'.
func EvaluationRequestDigest(members map[string]json.RawMessage) (string, error) {
	return EvaluationRequestDigestWith(members, MemberDigest)
}

// MemberDigest is "sha256:" and the hex SHA-256 of a member's RFC 8785
// canonical JSON.
func MemberDigest(v json.RawMessage) (string, error) {
	c, err := Canonicalize(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return digestString(sum), nil
}

// EvaluationRequestDigestWith is EvaluationRequestDigest with each member
// digested by digest (which must return exactly MemberDigest's result: a
// PDP caches the digests of the defaults a batch's items share).
func EvaluationRequestDigestWith(members map[string]json.RawMessage, digest func(json.RawMessage) (string, error)) (string, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, k := range EvaluationMembers {
		v, ok := members[k]
		if !ok {
			continue
		}
		d, err := digest(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", k, err)
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		// Member names and digests are ASCII that canonical JSON does not
		// escape.
		b.WriteString(`"` + k + `":"` + d + `"`)
	}
	b.WriteByte('}')
	sum := sha256.Sum256(b.Bytes())
	return digestString(sum), nil
}

// VerifyEvaluation checks one AuthZEN answer on its own — a single
// evaluation's response, or one item of a batch's evaluations — and
// returns the record and the leaf it proved. It fails closed: the record
// must be signed by a published key with the profile's typ and schema, be
// fresh, and its Merkle root must be reached from this answer's decision,
// context (every member but the proof), reason, ignored members, index and
// request digest through the answer's proof. With o.Request set (the
// evaluation request the consumer asked, defaults applied), the digest
// must be that request's; with o.RequestID set, the record must carry
// that X-Request-ID.
func VerifyEvaluation(answer []byte, o VerifyOptions) (*EvaluationRecord, *EvaluationLeaf, error) {
	if err := o.Profile.validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := ijson.Check(answer); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnsigned, err)
	}
	var a struct {
		Decision *bool                      `json:"decision"`
		Context  map[string]json.RawMessage `json:"context"`
	}
	if err := json.Unmarshal(answer, &a); err != nil || a.Decision == nil {
		return nil, nil, fmt.Errorf("%w: not an AuthZEN answer with a boolean decision", ErrUnsigned)
	}
	raw, ok := a.Context[ContextKey]
	if !ok {
		return nil, nil, fmt.Errorf("%w: the answer's context has no %q member", ErrUnsigned, ContextKey)
	}
	var p EvaluationProof
	if err := ijson.Decode(raw, &p); err != nil {
		return nil, nil, fmt.Errorf("%w: context.%s: %w", ErrUnsigned, ContextKey, err)
	}
	// The form is told by which members are present, whatever they hold:
	// record_jws alone, or record, root_jws and record_proof together.
	present, err := proofForm(raw)
	if err != nil {
		return nil, nil, err
	}
	var payload []byte
	var signedAt time.Time
	switch present {
	case formJWS:
		payload, err = verifyCompact(p.RecordJWS, o)
	case formGroup:
		payload, signedAt, err = verifyGrouped(&Signed{Record: p.Record, RootJWS: p.RootJWS, Proof: p.RecordProof}, o)
	}
	if err != nil {
		return nil, nil, err
	}
	r, err := readEvaluationRecord(payload, o)
	if err != nil {
		return nil, nil, err
	}
	if present == formGroup {
		if err := decidedBeforeSigned(r.Provenance.DecidedAt, signedAt, o); err != nil {
			return nil, nil, err
		}
	}
	cd, err := ContextDigest(a.Context)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the answer's context: %w", ErrUnsigned, err)
	}
	leaf := EvaluationLeaf{Index: p.Index, RequestDigest: p.RequestDigest, Decision: *a.Decision, Reason: p.Reason, ContextDigest: cd, Ignored: nonNil(p.Ignored)}
	if o.Request != nil {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o.Request, &m); err != nil {
			return nil, nil, fmt.Errorf("%w: the request sent is not a JSON object: %w", ErrRequestMismatch, err)
		}
		want, err := EvaluationRequestDigest(m)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: the request sent: %w", ErrRequestMismatch, err)
		}
		if want != leaf.RequestDigest {
			return nil, nil, fmt.Errorf("%w: request_digest %s, the evaluation request digests to %s", ErrRequestMismatch, leaf.RequestDigest, want)
		}
	}
	lb := leaf.canonical()
	path := make([][sha256.Size]byte, len(p.Proof))
	for i, s := range p.Proof {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) != sha256.Size {
			return nil, nil, fmt.Errorf("%w: proof hash %d is not a base64url SHA-256", ErrSignature, i)
		}
		copy(path[i][:], b)
	}
	root, err := rootFromProof(leaf.Index, r.Evaluations, leafHash(lb), path)
	if err != nil || "sha256:"+hex.EncodeToString(root[:]) != r.MerkleRoot {
		return nil, nil, fmt.Errorf("%w: evaluation %d of %d (decision %t, reason %q, its context, its ignored members) is not what the record signed", ErrSignature, leaf.Index, r.Evaluations, leaf.Decision, leaf.Reason)
	}
	return r, &leaf, nil
}

// The two signed forms of an evaluation answer.
const (
	formJWS   = 1 // record_jws: the record's own JWS (a batch's, or a record signed alone)
	formGroup = 2 // record, root_jws, record_proof: the record under a group's root
)

// proofForm says which signed form context.callerauth is in, by the
// members present (an empty string or null counts as present): exactly
// record_jws, or exactly all of record, root_jws and record_proof; any
// other combination — both forms, part of the group form, neither — is
// refused, naming the members.
func proofForm(raw json.RawMessage) (int, error) {
	has := map[string]bool{}
	if err := ijson.Members(raw, func(name, _ []byte) error {
		has[string(name)] = true
		return nil
	}); err != nil {
		return 0, fmt.Errorf("%w: context.%s: %w", ErrUnsigned, ContextKey, err)
	}
	group := []string{"record", "root_jws", "record_proof"}
	var some []string
	for _, m := range group {
		if has[m] {
			some = append(some, m)
		}
	}
	switch {
	case has["record_jws"] && len(some) > 0:
		return 0, fmt.Errorf("%w: context.%s has both forms: record_jws and %s", ErrUnsigned, ContextKey, strings.Join(some, ", "))
	case has["record_jws"]:
		return formJWS, nil
	case len(some) == len(group):
		return formGroup, nil
	case len(some) > 0:
		return 0, fmt.Errorf("%w: context.%s has %s, not all of record, root_jws and record_proof", ErrUnsigned, ContextKey, strings.Join(some, ", "))
	}
	return 0, fmt.Errorf("%w: context.%s has neither record_jws nor root_jws", ErrUnsigned, ContextKey)
}

// readEvaluationRecord reads a verified evaluation record's payload and
// checks its schema, freshness and request ID.
func readEvaluationRecord(payload []byte, o VerifyOptions) (*EvaluationRecord, error) {
	var r EvaluationRecord
	if err := ijson.Read(payload, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if r.Schema != o.Profile.Schema || r.Evaluations < 1 || r.Requested < r.Evaluations {
		return nil, fmt.Errorf("%w: schema %q (want %q), %d evaluations answered of %d requested", ErrSchema, r.Schema, o.Profile.Schema, r.Evaluations, r.Requested)
	}
	if o.RequestID != "" && r.RequestID != o.RequestID {
		return nil, fmt.Errorf("%w: the record answers X-Request-ID %q, not %q", ErrRequestMismatch, r.RequestID, o.RequestID)
	}
	if err := checkFresh(r.Provenance.DecidedAt, o); err != nil {
		return nil, err
	}
	return &r, nil
}

// readRecord verifies a record's compact JWS and reads its payload, I-JSON,
// into r.
func readRecord(compact string, o VerifyOptions, r any) error {
	payload, err := verifyCompact(compact, o)
	if err != nil {
		return err
	}
	if err := ijson.Read(payload, r); err != nil {
		return fmt.Errorf("%w: %w", ErrSchema, err)
	}
	return nil
}

// VerifyEvaluations checks a whole AuthZEN response against the request
// that asked it: a single evaluation's answer, or every answer of a batch.
// Beyond each answer verifying on its own ([VerifyEvaluation], with the
// item's request after defaults), every answer must come from one record,
// at its own position; the record must bind the request's endpoint,
// semantic and number of evaluations; and the number of answers must be
// what the semantic allows: all of them for execute_all, or up to and
// including the first deny (permit) for deny_on_first_deny
// (permit_on_first_permit). It returns the record and the leaves, in
// order. endpoint is "evaluation" or "evaluations".
func VerifyEvaluations(endpoint string, request, response []byte, o VerifyOptions) (*EvaluationRecord, []EvaluationLeaf, error) {
	items, semantic, err := EvaluationItems(endpoint, request)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the request: %w", ErrRequestMismatch, err)
	}
	var answers []json.RawMessage
	var shape struct {
		Evaluations *[]json.RawMessage `json:"evaluations"`
	}
	if err := ijson.Check(response); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnsigned, err)
	}
	if err := json.Unmarshal(response, &shape); err != nil {
		return nil, nil, fmt.Errorf("%w: the response is not a JSON object", ErrUnsigned)
	}
	batch := shape.Evaluations != nil
	if batch {
		answers = *shape.Evaluations
	} else {
		answers = []json.RawMessage{response}
	}
	if wantBatch := endpoint == "evaluations" && batchRequest(request); batch != wantBatch {
		return nil, nil, fmt.Errorf("%w: a request of %d evaluations to the %s endpoint is answered in the %s shape", ErrRequestMismatch, len(items), endpoint, map[bool]string{true: "evaluations", false: "single evaluation"}[batch])
	}
	if len(answers) == 0 || len(answers) > len(items) {
		return nil, nil, fmt.Errorf("%w: %d answers to %d evaluations", ErrRequestMismatch, len(answers), len(items))
	}
	var rec *EvaluationRecord
	var signed string // what signed the first answer's record: its JWS, or the record
	leaves := make([]EvaluationLeaf, 0, len(answers))
	for i, a := range answers {
		oi := o
		oi.Request = items[i]
		r, leaf, err := VerifyEvaluation(a, oi)
		if err != nil {
			return nil, nil, fmt.Errorf("answer %d: %w", i, err)
		}
		if leaf.Index != i {
			return nil, nil, fmt.Errorf("%w: answer %d proves evaluation %d", ErrRequestMismatch, i, leaf.Index)
		}
		var p struct {
			C map[string]struct {
				RecordJWS string          `json:"record_jws"`
				Record    json.RawMessage `json:"record"`
			} `json:"context"`
		}
		_ = json.Unmarshal(a, &p)
		by := p.C[ContextKey].RecordJWS
		if by == "" { // group-signed: the record itself, canonical (VerifyEvaluation read it)
			c, _ := Canonicalize(p.C[ContextKey].Record)
			by = string(c)
		}
		if rec == nil {
			rec, signed = r, by
		} else if by != signed {
			return nil, nil, fmt.Errorf("%w: answer %d is signed by another record (decision %s, not %s)", ErrRequestMismatch, i, r.DecisionID, rec.DecisionID)
		}
		leaves = append(leaves, *leaf)
	}
	if rec.Endpoint != endpoint || rec.Semantic != semantic || rec.Requested != len(items) || rec.Evaluations != len(answers) {
		return nil, nil, fmt.Errorf("%w: the record answers %d of %d evaluations to %q under %s; the request asked %d to %q under %s and %d answers came",
			ErrRequestMismatch, rec.Evaluations, rec.Requested, rec.Endpoint, rec.Semantic, len(items), endpoint, semantic, len(answers))
	}
	if len(answers) < len(items) {
		last := leaves[len(leaves)-1].Decision
		stops := (semantic == "deny_on_first_deny" && !last) || (semantic == "permit_on_first_permit" && last)
		if !stops {
			return nil, nil, fmt.Errorf("%w: %d of %d evaluations answered, but %s does not stop at a %t", ErrRequestMismatch, len(answers), len(items), semantic, last)
		}
	}
	for i, l := range leaves[:len(leaves)-1] {
		if (semantic == "deny_on_first_deny" && !l.Decision) || (semantic == "permit_on_first_permit" && l.Decision) {
			return nil, nil, fmt.Errorf("%w: %s should have stopped at evaluation %d", ErrRequestMismatch, semantic, i)
		}
	}
	return rec, leaves, nil
}

func batchRequest(request []byte) bool {
	var m struct {
		Evaluations []json.RawMessage `json:"evaluations"`
	}
	return json.Unmarshal(request, &m) == nil && len(m.Evaluations) > 0
}

// EvaluationItems reads an AuthZEN request to endpoint ("evaluation" or
// "evaluations") as the PDP does (§7.1): each evaluation with the batch's
// defaults applied, its members' JSON as sent, and the evaluations
// semantic (execute_all unless options name another). A request without
// evaluations, with an empty array, or sent to the single endpoint (where
// evaluations and options mean nothing) is one evaluation of its
// top-level members.
func EvaluationItems(endpoint string, request []byte) ([][]byte, string, error) {
	if err := ijson.Check(request); err != nil {
		return nil, "", err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(request, &top); err != nil {
		return nil, "", errors.New("not a JSON object")
	}
	semantic := "execute_all"
	if endpoint != "evaluations" {
		delete(top, "options")
		delete(top, "evaluations")
	}
	if raw, ok := top["options"]; ok {
		var opts struct {
			Semantic *string `json:"evaluations_semantic"`
		}
		if json.Unmarshal(raw, &opts) == nil && opts.Semantic != nil {
			semantic = *opts.Semantic
		}
	}
	var list []map[string]json.RawMessage
	if raw, ok := top["evaluations"]; ok {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, "", errors.New("evaluations is not an array of objects")
		}
	}
	pick := func(own map[string]json.RawMessage) []byte {
		m := map[string]json.RawMessage{}
		for _, k := range EvaluationMembers {
			if v, ok := own[k]; ok {
				m[k] = v
			} else if v, ok := top[k]; ok {
				m[k] = v
			}
		}
		b, _ := json.Marshal(m)
		return b
	}
	if len(list) == 0 {
		return [][]byte{pick(nil)}, semantic, nil
	}
	items := make([][]byte, len(list))
	for i, it := range list {
		items[i] = pick(it)
	}
	return items, semantic, nil
}
