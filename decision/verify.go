package decision

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// Verification failures, for errors.Is. Every one of them means: deny.
var (
	ErrUnsigned        = errors.New("decision: the response carries no signed record")
	ErrSignature       = errors.New("decision: the record's signature does not verify")
	ErrUnknownKey      = errors.New("decision: the record is signed by a key not in the JWKS")
	ErrSchema          = errors.New("decision: the record is not of the expected schema")
	ErrRequestMismatch = errors.New("decision: the record is not for this request")
	ErrStale           = errors.New("decision: the record is too old, or from the future")
)

// VerifyOptions says what a consumer checks.
type VerifyOptions struct {
	// Profile is the record format expected: its schema and JWS typ.
	// Required.
	Profile Profile
	// Keys are the PDP's published verification keys. Required.
	Keys jose.JSONWebKeySet
	// Request, when set, is the request the consumer sent (its JSON); the
	// record's request_digest must be its digest.
	Request []byte
	// RequestID, when set, is the X-Request-ID the consumer sent; an
	// AuthZEN record must carry it.
	RequestID string
	// MaxAge is how old a record may be. Default 5 minutes.
	MaxAge time.Duration
	// Skew is how far in the future decided_at may be. Default 30 s.
	Skew time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// base64url is base64url without padding.
func base64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// Verify checks a PDP response and returns the record it signed. It fails
// closed: anything short of a fresh record, signed by a published key under
// an allowed algorithm with the right typ, binding the request the consumer
// sent, is an error.
func Verify(response []byte, o VerifyOptions) (*Record, error) {
	if err := o.Profile.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	var s Signed
	if err := ijson.Read(response, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsigned, err)
	}
	var payload []byte
	var signedAt time.Time // a group's root's
	switch {
	case s.RecordJWS != "" && s.RootJWS != "":
		return nil, fmt.Errorf("%w: both record_jws and root_jws", ErrUnsigned)
	case s.RootJWS != "":
		var err error
		if payload, signedAt, err = verifyGrouped(&s, o); err != nil {
			return nil, err
		}
	case s.RecordJWS != "":
		var err error
		if payload, err = verifyCompact(s.RecordJWS, o); err != nil {
			return nil, err
		}
		// The unsigned copy, if any, must say exactly what was signed.
		if len(s.Record) > 0 && string(s.Record) != "null" {
			c, err := Canonicalize(s.Record)
			if err != nil || !bytes.Equal(c, payload) {
				return nil, fmt.Errorf("%w: the unsigned record differs from the signed one", ErrSignature)
			}
		}
	default:
		return nil, ErrUnsigned
	}
	var r Record
	if err := ijson.Read(payload, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if r.Schema != o.Profile.Schema || !slices.Contains([]string{Allow, Deny}, r.Effect) {
		return nil, fmt.Errorf("%w: schema %q (want %q), effect %q", ErrSchema, r.Schema, o.Profile.Schema, r.Effect)
	}
	bound, err := Digest(r.Binding)
	if err != nil || bound != r.RequestDigest {
		return nil, fmt.Errorf("%w: request_digest does not match the record's own binding", ErrRequestMismatch)
	}
	if o.Request != nil {
		want, err := digestOfRequest(o.Request)
		if err != nil {
			return nil, fmt.Errorf("%w: the request sent: %w", ErrRequestMismatch, err)
		}
		if want != r.RequestDigest {
			return nil, fmt.Errorf("%w: request_digest %s, the request sent digests to %s", ErrRequestMismatch, r.RequestDigest, want)
		}
	}
	if err := checkFresh(r.Provenance.DecidedAt, o); err != nil {
		return nil, err
	}
	if !signedAt.IsZero() {
		if err := decidedBeforeSigned(r.Provenance.DecidedAt, signedAt, o); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// decidedBeforeSigned refuses a group-signed record decided after the
// root that signs it was signed (beyond the skew): a root signs records
// already decided.
func decidedBeforeSigned(decided, signed time.Time, o VerifyOptions) error {
	skew := o.Skew
	if skew <= 0 {
		skew = 30 * time.Second
	}
	if decided.Sub(signed) > skew {
		return fmt.Errorf("%w: decided at %s, after its root was signed (%s)", ErrStale, decided.UTC().Format(time.RFC3339Nano), signed.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// verifyGrouped checks a group-signed response: the root's JWS under the
// profile's root profile, the root's schema, and the record's inclusion
// proof from its canonical JSON to the signed Merkle root. It returns the
// record's canonical JSON.
func verifyGrouped(s *Signed, o VerifyOptions) ([]byte, time.Time, error) {
	if s.Proof == nil || len(s.Record) == 0 || string(s.Record) == "null" {
		return nil, time.Time{}, fmt.Errorf("%w: root_jws without its record and proof", ErrUnsigned)
	}
	ro := o
	ro.Profile = o.Profile.Root()
	var root Root
	if err := readRecord(s.RootJWS, ro, &root); err != nil {
		return nil, time.Time{}, err
	}
	if root.Schema != ro.Profile.Schema || root.Records < 1 || !merkleRootForm.MatchString(root.MerkleRoot) {
		return nil, time.Time{}, fmt.Errorf("%w: root schema %q (want %q), %d records, merkle_root %q (want sha256: and 64 lower-case hex digits)", ErrSchema, root.Schema, ro.Profile.Schema, root.Records, root.MerkleRoot)
	}
	// Signed within the records' freshness: at most MaxAge ago, at most
	// Skew ahead.
	if err := checkFresh(root.SignedAt, o); err != nil {
		return nil, time.Time{}, fmt.Errorf("the root's signed_at: %w", err)
	}
	payload, err := Canonicalize(s.Record)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: the record: %w", ErrUnsigned, err)
	}
	path := make([][sha256.Size]byte, len(s.Proof.Hashes))
	for i, h := range s.Proof.Hashes {
		b, err := base64.RawURLEncoding.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return nil, time.Time{}, fmt.Errorf("%w: proof hash %d is not a base64url SHA-256", ErrSignature, i)
		}
		copy(path[i][:], b)
	}
	got, err := rootFromProof(s.Proof.Index, root.Records, leafHash(payload), path)
	if err != nil || "sha256:"+hex.EncodeToString(got[:]) != root.MerkleRoot {
		return nil, time.Time{}, fmt.Errorf("%w: record %d of %d is not what the root signed", ErrSignature, s.Proof.Index, root.Records)
	}
	return payload, root.SignedAt, nil
}

// merkleRootForm is a merkle_root as the signer writes it, the only form
// a verifier accepts: sha256: and the hash in lower-case hex.
var merkleRootForm = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// digestOfRequest digests the normalized form of a request the consumer
// sent: the PDP binds the request as it decoded it, so the consumer's JSON
// is canonicalized the same way.
func digestOfRequest(req []byte) (string, error) {
	return Digest(req)
}

// verifyCompact checks a compact JWS against the options' profile and
// keys: an allowed algorithm, the profile's typ, a kid naming exactly one
// published key of that algorithm, a valid signature. It returns the
// payload.
func verifyCompact(compact string, o VerifyOptions) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(compact, Algorithms)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSignature, err)
	}
	hdr := jws.Signatures[0].Protected
	if typ, _ := hdr.ExtraHeaders[jose.HeaderType].(string); typ != o.Profile.Type {
		return nil, fmt.Errorf("%w: typ %q, want %q", ErrSignature, typ, o.Profile.Type)
	}
	keys := o.Keys.Key(hdr.KeyID)
	if hdr.KeyID == "" || len(keys) != 1 {
		return nil, fmt.Errorf("%w: kid %q", ErrUnknownKey, hdr.KeyID)
	}
	key := keys[0]
	if key.Algorithm != "" && key.Algorithm != hdr.Algorithm {
		return nil, fmt.Errorf("%w: key %s is for %s, the record says %s", ErrSignature, hdr.KeyID, key.Algorithm, hdr.Algorithm)
	}
	payload, err := jws.Verify(key.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSignature, err)
	}
	return payload, nil
}

// checkFresh refuses a record decided longer than MaxAge ago (default 5
// minutes) or more than Skew (default 30 s) in the future.
func checkFresh(at time.Time, o VerifyOptions) error {
	now, maxAge, skew := time.Now, o.MaxAge, o.Skew
	if o.Now != nil {
		now = o.Now
	}
	if maxAge <= 0 {
		maxAge = 5 * time.Minute
	}
	if skew <= 0 {
		skew = 30 * time.Second
	}
	t := now()
	if at.IsZero() || t.Sub(at) > maxAge || at.Sub(t) > skew {
		return fmt.Errorf("%w: decided at %s, now %s, max age %s", ErrStale, at.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339), maxAge)
	}
	return nil
}
