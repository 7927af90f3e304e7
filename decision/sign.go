package decision

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"unsafe"

	jose "github.com/go-jose/go-jose/v4"
)

// Profile names a record format: the record's schema member and the typ
// header of its JWS. A signer writes them and a verifier insists on them,
// so that a record of one format is never taken for another. The package
// has no default: the PDP states its own (the flex-auth decision record v2).
type Profile struct {
	// Schema is the record's "schema" member.
	Schema string
	// Type is the JWS's typ header (RFC 8725 §3.11: explicit typing).
	Type string
}

func (p Profile) validate() error {
	if p.Schema == "" || p.Type == "" {
		return errors.New("decision: a profile needs a schema and a JWS type")
	}
	return nil
}

// Algorithms a record may be signed with.
var Algorithms = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA}

// Signed is the PDP's response: the record and its signature.
type Signed struct {
	Record    json.RawMessage `json:"record"`
	RecordJWS string          `json:"record_jws,omitempty"`
	// RootJWS and Proof: a record signed with others (group.go) carries
	// the JWS of their Merkle root and its place in the tree instead of a
	// RecordJWS of its own.
	RootJWS string `json:"root_jws,omitempty"`
	Proof   *Proof `json:"proof,omitempty"`
}

// JWS is the compact JWS that signs the response: its own record's, or
// its group's root.
func (s *Signed) JWS() string {
	if s.RootJWS != "" {
		return s.RootJWS
	}
	return s.RecordJWS
}

// Signer signs records with the newest of its keys and publishes all of
// them, so that keys can rotate without breaking consumers that hold the
// previous JWKS.
//
//	profile := decision.Profile{Schema: "example.decision-record.v1", Type: "example-decision+jwt"}
//	signer, err := decision.NewSigner(profile, key) // key: a crypto.Signer (ECDSA, RSA, Ed25519)
//	signed, err := signer.Sign(&record)             // record.Bind(request) first
//	// the consumer, with the published keys:
//	got, err := decision.Verify(response, decision.VerifyOptions{Profile: profile, Keys: signer.JWKS(), Request: request})
type Signer struct {
	profile Profile
	keys    []jose.JSONWebKey // private, oldest first
	current jose.JSONWebKey
	header  string // the protected header, base64url: the same for every record
	// rootHeader is the protected header of a group's root (typ
	// Profile.Root().Type), rootSchema its schema: made once.
	rootHeader, rootSchema string
}

// NewSigner signs records of profile p. It takes keys oldest first; the
// last one signs. Each must be an ECDSA P-256 or Ed25519 private key.
func NewSigner(p Profile, keys ...crypto.Signer) (*Signer, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("decision: at least one signing key is required")
	}
	s := &Signer{profile: p, rootSchema: p.Root().Schema}
	for i, k := range keys {
		alg, err := algorithmOf(k)
		if err != nil {
			return nil, fmt.Errorf("decision: key %d: %w", i, err)
		}
		jwk := jose.JSONWebKey{Key: k, Algorithm: string(alg), Use: "sig"}
		pub := jwk.Public()
		tp, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("decision: key %d: %w", i, err)
		}
		jwk.KeyID = base64url(tp)
		s.keys = append(s.keys, jwk)
	}
	s.current = s.keys[len(s.keys)-1]
	// The compact JWS is written here rather than by go-jose's general
	// signer: its protected header never changes, so it is encoded once,
	// and a record costs one base64 encoding and the signature (go-jose
	// verifies what this writes in every test).
	for _, h := range []struct {
		typ string
		to  *string
	}{{p.Type, &s.header}, {p.Root().Type, &s.rootHeader}} {
		hdr, err := json.Marshal(struct {
			Alg string `json:"alg"`
			Kid string `json:"kid"`
			Typ string `json:"typ"`
		}{s.current.Algorithm, s.current.KeyID, h.typ})
		if err != nil {
			return nil, fmt.Errorf("decision: %w", err)
		}
		*h.to = base64.RawURLEncoding.EncodeToString(hdr)
	}
	return s, nil
}

// compact signs payload as a compact JWS (RFC 7515 §7.1) with the current
// key: ES256 as R||S of 32 bytes each (RFC 7518 §3.4), or EdDSA (RFC 8037).
func (s *Signer) compact(payload []byte) (string, error) { return s.sign(s.header, payload) }

// sign writes a compact JWS of payload under the protected header given
// (base64url).
func (s *Signer) sign(header string, payload []byte) (string, error) {
	enc := base64.RawURLEncoding
	b := make([]byte, 0, len(header)+1+enc.EncodedLen(len(payload))+1+enc.EncodedLen(ed25519.SignatureSize))
	b = append(b, header...)
	b = append(b, '.')
	b = enc.AppendEncode(b, payload)
	var sig []byte
	switch k := s.current.Key.(type) {
	case *ecdsa.PrivateKey:
		digest := sha256.Sum256(b)
		r, ss, err := ecdsa.Sign(rand.Reader, k, digest[:])
		if err != nil {
			return "", fmt.Errorf("decision: signing: %w", err)
		}
		sig = make([]byte, 64)
		r.FillBytes(sig[:32])
		ss.FillBytes(sig[32:])
	case ed25519.PrivateKey:
		sig = ed25519.Sign(k, b)
	default:
		return "", fmt.Errorf("decision: signing: unsupported key %T", k)
	}
	b = append(b, '.')
	b = enc.AppendEncode(b, sig)
	// b was made for this JWS alone and is not written again: the string
	// shares its bytes (a copy of every record's JWS saved).
	return unsafe.String(unsafe.SliceData(b), len(b)), nil //nolint:gosec // audited: b is local and never written after this line.
}

func algorithmOf(k crypto.Signer) (jose.SignatureAlgorithm, error) {
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", errors.New("an ECDSA key must be on P-256 (ES256)")
		}
		return jose.ES256, nil
	case ed25519.PrivateKey:
		return jose.EdDSA, nil
	default:
		return "", fmt.Errorf("unsupported key type %T (want ECDSA P-256 or Ed25519)", k)
	}
}

// KeyID returns the kid of the signing key.
func (s *Signer) KeyID() string { return s.current.KeyID }

// JWKS returns the public keys, newest last.
func (s *Signer) JWKS() jose.JSONWebKeySet {
	var set jose.JSONWebKeySet
	for _, k := range s.keys {
		set.Keys = append(set.Keys, k.Public())
	}
	return set
}

// Profile returns the profile the signer signs.
func (s *Signer) Profile() Profile { return s.profile }

// Sign completes and signs a record: the schema is set, and the payload is
// the record's canonical JSON.
func (s *Signer) Sign(r *Record) (*Signed, error) {
	r.Schema = s.profile.Schema
	payload, err := r.canonical()
	if err != nil {
		return nil, err
	}
	compact, err := s.compact(payload)
	if err != nil {
		return nil, err
	}
	return &Signed{Record: payload, RecordJWS: compact}, nil
}

// GenerateKeyFile writes a new ECDSA P-256 private key (ES256, the
// default), PKCS#8 PEM, mode 0600, to path; it refuses to overwrite an
// existing file.
func GenerateKeyFile(path string) error { return GenerateKeyFileFor(jose.ES256, path) }

// GenerateKeyFileFor is [GenerateKeyFile] for a chosen algorithm: ES256 (an
// ECDSA P-256 key) or EdDSA (an Ed25519 key).
func GenerateKeyFileFor(alg jose.SignatureAlgorithm, path string) error {
	var k any
	var err error
	switch alg {
	case jose.ES256:
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		return fmt.Errorf("decision: algorithm %q: want ES256 or EdDSA", alg)
	}
	if err != nil {
		return fmt.Errorf("decision: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return fmt.Errorf("decision: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("decision: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		_ = f.Close()
		return fmt.Errorf("decision: %w", err)
	}
	return f.Close()
}

// LoadKeyFile reads every PEM private key in path, oldest first: a file may
// hold several keys during a rotation, and the last one signs.
func LoadKeyFile(path string) ([]crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("decision: signing key file: %w", err)
	}
	var keys []crypto.Signer
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "PRIVATE KEY" && blk.Type != "EC PRIVATE KEY" {
			continue
		}
		var k any
		if blk.Type == "EC PRIVATE KEY" {
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		} else {
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("decision: signing key file %s: %w", path, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("decision: signing key file %s: %T cannot sign", path, k)
		}
		keys = append(keys, s)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("decision: signing key file %s holds no PEM private key", path)
	}
	return keys, nil
}

// SignClaims signs a JWT (RFC 7519) of claims under the signer's profile
// type: the claims in RFC 8785 canonical JSON, a compact JWS with the
// current key. For documents a PDP asserts about itself, such as AuthZEN's
// signed_metadata.
func (s *Signer) SignClaims(claims map[string]any) (string, error) {
	payload, err := CanonicalJSON(claims)
	if err != nil {
		return "", err
	}
	return s.compact(payload)
}
