package decision

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// SearchRecord is the signed record of one AuthZEN search page (§8): a
// page is signed once. It binds the request as sent (its digest, the
// pagination token included), the X-Request-ID, and the answer itself —
// the results, the page object with its next_token and count, any context
// — through the digest of the answer without its proof; and it lists the
// request's members the PDP did not interpret.
type SearchRecord struct {
	Schema        string     `json:"schema"`
	DecisionID    string     `json:"decision_id"`
	PolicyVersion string     `json:"policy_version"`
	Endpoint      string     `json:"endpoint"` // search/subject, search/resource or search/action
	RequestDigest string     `json:"request_digest"`
	RequestID     string     `json:"request_id"`
	AnswerDigest  string     `json:"answer_digest"`
	Ignored       []string   `json:"ignored"`
	Provenance    Provenance `json:"provenance"`
	Caller        Caller     `json:"caller"`
}

// SearchProof is what a search answer's context carries under
// [ContextKey].
type SearchProof struct {
	RecordJWS string `json:"record_jws"`
}

// AnswerDigest is the digest a search record binds for an answer: the
// RFC 8785 canonical JSON of the answer without context.callerauth (and
// without context when nothing else is in it).
func AnswerDigest(answer []byte) (string, error) {
	if err := ijson.Check(answer); err != nil {
		return "", err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(answer, &m); err != nil {
		return "", errors.New("the answer is not a JSON object")
	}
	if raw, ok := m["context"]; ok {
		var ctx map[string]json.RawMessage
		if err := json.Unmarshal(raw, &ctx); err != nil {
			return "", errors.New("the answer's context is not a JSON object")
		}
		delete(ctx, ContextKey)
		if len(ctx) == 0 {
			delete(m, "context")
		} else {
			b, _ := json.Marshal(ctx)
			m["context"] = b
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return Digest(b)
}

// SignSearch signs a search page: it completes the record (schema, the
// answer's digest) and returns the proof the answer's context carries.
// answer is the page as it will be sent, without its proof.
func (s *Signer) SignSearch(r *SearchRecord, answer []byte) (SearchProof, error) {
	d, err := AnswerDigest(answer)
	if err != nil {
		return SearchProof{}, fmt.Errorf("decision: the search answer: %w", err)
	}
	r.Schema, r.AnswerDigest, r.Ignored = s.profile.Schema, d, nonNil(r.Ignored)
	payload, err := CanonicalJSON(r)
	if err != nil {
		return SearchProof{}, err
	}
	compact, err := s.compact(payload)
	if err != nil {
		return SearchProof{}, err
	}
	return SearchProof{RecordJWS: compact}, nil
}

// VerifySearch checks a search page against the request that asked it:
// the record must be signed by a published key with the profile's typ and
// schema, be fresh, bind this request (its digest, token included) and
// this answer (every member but the proof); with o.RequestID set, the
// record must carry that X-Request-ID. endpoint, when not empty, must be
// the record's.
func VerifySearch(endpoint string, request, answer []byte, o VerifyOptions) (*SearchRecord, error) {
	if err := o.Profile.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := ijson.Check(answer); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsigned, err)
	}
	var a struct {
		Context map[string]json.RawMessage `json:"context"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return nil, fmt.Errorf("%w: not a search answer", ErrUnsigned)
	}
	raw, ok := a.Context[ContextKey]
	if !ok {
		return nil, fmt.Errorf("%w: the answer's context has no %q member", ErrUnsigned, ContextKey)
	}
	var p SearchProof
	if err := ijson.Decode(raw, &p); err != nil || p.RecordJWS == "" {
		return nil, fmt.Errorf("%w: context.%s carries no record_jws", ErrUnsigned, ContextKey)
	}
	var r SearchRecord
	if err := readRecord(p.RecordJWS, o, &r); err != nil {
		return nil, err
	}
	if r.Schema != o.Profile.Schema {
		return nil, fmt.Errorf("%w: schema %q, want %q", ErrSchema, r.Schema, o.Profile.Schema)
	}
	if endpoint != "" && r.Endpoint != endpoint {
		return nil, fmt.Errorf("%w: the record answers %s, not %s", ErrRequestMismatch, r.Endpoint, endpoint)
	}
	ad, err := AnswerDigest(answer)
	if err != nil || ad != r.AnswerDigest {
		return nil, fmt.Errorf("%w: the answer (its results, page or context) is not what the record signed", ErrSignature)
	}
	if request != nil {
		want, err := Digest(request)
		if err != nil {
			return nil, fmt.Errorf("%w: the request sent: %w", ErrRequestMismatch, err)
		}
		if want != r.RequestDigest {
			return nil, fmt.Errorf("%w: request_digest %s, the request sent digests to %s", ErrRequestMismatch, r.RequestDigest, want)
		}
	}
	if o.RequestID != "" && r.RequestID != o.RequestID {
		return nil, fmt.Errorf("%w: the record answers X-Request-ID %q, not %q", ErrRequestMismatch, r.RequestID, o.RequestID)
	}
	if err := checkFresh(r.Provenance.DecidedAt, o); err != nil {
		return nil, err
	}
	return &r, nil
}
