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
// verified on its own.
type EvaluationRecord struct {
	Schema        string     `json:"schema"`
	DecisionID    string     `json:"decision_id"`
	PolicyVersion string     `json:"policy_version"`
	Evaluations   int        `json:"evaluations"` // leaves in the tree
	MerkleRoot    string     `json:"merkle_root"` // "sha256:" + hex
	Provenance    Provenance `json:"provenance"`
	Caller        Caller     `json:"caller"`
}

// EvaluationLeaf is one evaluation as its leaf binds it: its position in
// the request, the digest of the evaluation request it decided (subject,
// action, resource and context after the batch's defaults are applied,
// RFC 8785 canonical JSON), the decision and the reason.
type EvaluationLeaf struct {
	Index         int    `json:"index"`
	RequestDigest string `json:"request_digest"`
	Decision      bool   `json:"decision"`
	Reason        string `json:"reason"`
}

// EvaluationProof is what an answer's context carries under [ContextKey].
type EvaluationProof struct {
	RecordJWS     string   `json:"record_jws"`
	Index         int      `json:"index"`
	RequestDigest string   `json:"request_digest"`
	Reason        string   `json:"reason"`
	Proof         []string `json:"proof"` // base64url SHA-256 hashes, leaf to root
}

// canonical is the leaf's RFC 8785 canonical JSON, written directly: the
// members in their sorted order, the strings escaped as RFC 8785 says. It
// equals CanonicalJSON(l) (TestLeafCanonical) without its reflective round
// trip, once per evaluation.
func (l EvaluationLeaf) canonical() []byte {
	var b bytes.Buffer
	b.Grow(64 + len(l.Reason) + len(l.RequestDigest))
	b.WriteString(`{"decision":`)
	b.WriteString(strconv.FormatBool(l.Decision))
	b.WriteString(`,"index":`)
	b.WriteString(strconv.Itoa(l.Index))
	b.WriteString(`,"reason":`)
	writeString(&b, l.Reason)
	b.WriteString(`,"request_digest":`)
	writeString(&b, l.RequestDigest)
	b.WriteByte('}')
	return b.Bytes()
}

// SignEvaluations signs a batch of evaluations once: it completes the
// record (schema, count, Merkle root), signs it and returns the record's
// canonical JSON and, for each leaf, the proof its answer carries.
func (s *Signer) SignEvaluations(r *EvaluationRecord, leaves []EvaluationLeaf) ([]byte, []EvaluationProof, error) {
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
	r.MerkleRoot = "sha256:" + hex.EncodeToString(root[:])
	payload, err := r.canonical()
	if err != nil {
		return nil, nil, err
	}
	compact, err := s.compact(payload)
	if err != nil {
		return nil, nil, err
	}
	proofs := make([]EvaluationProof, len(leaves))
	for i, l := range leaves {
		path := t.proof(i, 0, len(hashes))
		p := EvaluationProof{RecordJWS: compact, Index: i, RequestDigest: l.RequestDigest, Reason: l.Reason, Proof: make([]string, len(path))}
		for j, h := range path {
			p.Proof[j] = base64url(h[:])
		}
		proofs[i] = p
	}
	return payload, proofs, nil
}

// VerifyEvaluation checks one AuthZEN answer on its own — a single
// evaluation's response, or one item of a batch's evaluations — and
// returns the record and the leaf it proved. It fails closed: the record
// must be signed by a published key with the profile's typ and schema, be
// fresh, and its Merkle root must be reached from this answer's decision,
// reason, index and request digest through the answer's proof. With
// o.Request set (the evaluation request the consumer asked, defaults
// applied), the digest must be that request's.
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
	if p.RecordJWS == "" {
		return nil, nil, fmt.Errorf("%w: context.%s has no record_jws", ErrUnsigned, ContextKey)
	}
	payload, err := verifyCompact(p.RecordJWS, o)
	if err != nil {
		return nil, nil, err
	}
	var r EvaluationRecord
	if err := ijson.Check(payload); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if r.Schema != o.Profile.Schema || r.Evaluations < 1 {
		return nil, nil, fmt.Errorf("%w: schema %q (want %q), %d evaluations", ErrSchema, r.Schema, o.Profile.Schema, r.Evaluations)
	}
	leaf := EvaluationLeaf{Index: p.Index, RequestDigest: p.RequestDigest, Decision: *a.Decision, Reason: p.Reason}
	if o.Request != nil {
		want, err := Digest(o.Request)
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
		return nil, nil, fmt.Errorf("%w: evaluation %d of %d (decision %t, reason %q) is not what the record signed", ErrSignature, leaf.Index, r.Evaluations, leaf.Decision, leaf.Reason)
	}
	if err := checkFresh(r.Provenance.DecidedAt, o); err != nil {
		return nil, nil, err
	}
	return &r, &leaf, nil
}
