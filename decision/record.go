package decision

import (
	"crypto/sha256"
	"encoding/json"
	"time"
)

// Effects.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Record is a decision record.
type Record struct {
	Schema        string          `json:"schema"`
	DecisionID    string          `json:"decision_id"`
	Effect        string          `json:"effect"`
	Reason        string          `json:"reason"`
	PolicyVersion string          `json:"policy_version"`
	Binding       json.RawMessage `json:"binding"`
	RequestDigest string          `json:"request_digest"`
	Provenance    Provenance      `json:"provenance"`
	Caller        Caller          `json:"caller"`

	bound []byte // the canonical binding Bind made
}

// Provenance says what produced the decision.
type Provenance struct {
	Evaluator              string    `json:"evaluator"`
	Mode                   string    `json:"mode"`
	PolicyPackageID        string    `json:"policy_package_id"`
	PolicyPackageDigest    string    `json:"policy_package_digest"`
	RegistrySnapshotDigest string    `json:"registry_snapshot_digest"`
	DecidedAt              time.Time `json:"decided_at"`
}

// Caller is who obtained the decision. Under enforce it is always an
// authenticated caller; under warn a request that enforce would have refused
// is recorded with Authenticated false and the reason enforce would have
// given.
type Caller struct {
	Authenticated   bool       `json:"authenticated"`
	Principal       string     `json:"principal,omitempty"`
	UID             string     `json:"uid,omitempty"`
	CredentialID    string     `json:"credential_id,omitempty"`
	PodName         string     `json:"pod_name,omitempty"`
	PodUID          string     `json:"pod_uid,omitempty"`
	Audiences       []string   `json:"audiences,omitempty"`
	TokenIssuedAt   *time.Time `json:"token_issued_at,omitempty"`
	TokenExpiresAt  *time.Time `json:"token_expires_at,omitempty"`
	AuthenticatedBy string     `json:"authenticated_by,omitempty"`
	Reason          string     `json:"reason,omitempty"`
}

// Digest returns "sha256:" + the hex SHA-256 of the canonical JSON of a
// JSON document.
func Digest(doc []byte) (string, error) {
	c, err := Canonicalize(doc)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return digestString(sum), nil
}

// BindCanonical binds a request whose RFC 8785 canonical JSON the caller
// has written itself (it must be exactly that: a consumer digests the
// canonical form of what it sent, and a record bound to anything else
// does not verify).
func (r *Record) BindCanonical(c []byte) {
	r.Binding, r.bound = c, c
	sum := sha256.Sum256(c)
	r.RequestDigest = digestString(sum)
}

// Bind canonicalizes the normalized request into the record's binding and
// sets its digest.
func (r *Record) Bind(request any) error {
	c, err := CanonicalJSON(request)
	if err != nil {
		return err
	}
	r.Binding, r.bound = c, c
	sum := sha256.Sum256(c)
	r.RequestDigest = digestString(sum)
	return nil
}
