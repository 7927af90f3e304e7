package oidc

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"unsafe"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// A compact JWS (RFC 7515 §7.1) is verified here directly, in one pass over
// the token, rather than through go-jose's general JWS object: the token is
// split once, the payload decoded once (the claims are read from the very
// bytes whose signature verifies), and the signature checked with the
// standard library. The rules are RFC 7515's and RFC 7518's:
//   - exactly three base64url segments, unpadded;
//   - the protected header an I-JSON object (RFC 7493: no duplicate member,
//     valid UTF-8) whose "alg" is a string among the issuer's allowed
//     algorithms — never none, never HMAC (the configuration refuses them);
//   - a "crit" member is refused unless it is ["b64"] with "b64": true —
//     RFC 7797's extension, whose true value is the ordinary encoding and
//     the one extension understood here (go-jose, the API server's, takes
//     it too); §4.1.11 says a recipient must reject any other. "b64":
//     false (an unencoded payload) is refused: a JWT's claims are
//     base64url (RFC 7519 §7.2);
//   - the key must be of the algorithm's type and, for ECDSA, curve, and a
//     key whose JWK names an "alg" is used for that algorithm only;
//   - ECDSA signatures are R||S of exactly twice the curve's size (RFC 7518
//     §3.4), RSASSA-PSS salts are the hash's length (§3.5).
//
// FuzzCompactAgainstGoJose checks every decision against go-jose's.

// maxHeader bounds a protected header, decoded.
const maxHeader = 4 << 10

// jwsHeader is what the verifier reads of a protected header.
type jwsHeader struct {
	alg, kid string
	hasAlg   bool
	crit     []byte // raw, when present
	b64      []byte // raw, when present
}

// readHeader reads a protected header: an I-JSON object whose members are
// matched exactly ("ALG" is not "alg"); "alg" and "kid" must be strings.
func readHeader(raw []byte, h *jwsHeader) error {
	return ijson.Members(raw, func(name, v []byte) error {
		var ok bool
		switch string(name) {
		case "alg":
			h.alg, ok = ijson.String(v)
			h.hasAlg = true
		case "kid":
			h.kid, ok = ijson.String(v)
		case "crit":
			h.crit, ok = v, true
		case "b64":
			h.b64, ok = v, true
		default:
			return nil
		}
		if !ok {
			return fmt.Errorf("%q is not a string", name)
		}
		return nil
	})
}

// compactJWS is a compact JWS split and decoded.
type compactJWS struct {
	alg, kid     string
	signingInput string // header.payload, as signed
	sig          []byte
}

var errNotCompact = errors.New("not a compact JWS (three dot-separated segments)")

// compactAlphabet reports whether tok holds only what a compact JWS can:
// the base64url alphabet (RFC 7515 §2: no padding, no white space — Go's
// decoder would skip \r and \n) and the two dots between segments. It is
// asked only of a token that failed to decode, to say why.
func compactAlphabet(tok string) bool {
	for i := 0; i < len(tok); i++ {
		if !compactBytes[tok[i]] {
			return false
		}
	}
	return true
}

// noSkippedBytes reports whether tok holds neither \r nor \n, the two
// bytes outside base64url that Go's decoders skip instead of refusing:
// with them ruled out, decoding the three segments refuses every byte
// [compactAlphabet] would, for two vectorised scans instead of a table
// lookup per byte.
func noSkippedBytes(tok string) bool {
	return strings.IndexByte(tok, '\n') < 0 && strings.IndexByte(tok, '\r') < 0
}

// compactBytes marks the bytes compactAlphabet allows.
var compactBytes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
	}
	return t
}()

// parseCompact splits and decodes a compact JWS and checks its header
// against the algorithms allowed; it does not verify the signature.
func parseCompact(tok string, algs []string) (compactJWS, error) {
	h, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return compactJWS{}, errNotCompact
	}
	p, s, ok := strings.Cut(rest, ".")
	if !ok || strings.IndexByte(s, '.') >= 0 || h == "" || p == "" || s == "" {
		return compactJWS{}, errNotCompact
	}
	if base64.RawURLEncoding.DecodedLen(len(h)) > maxHeader {
		return compactJWS{}, fmt.Errorf("protected header longer than %d bytes", maxHeader)
	}
	raw, err := base64.RawURLEncoding.AppendDecode(make([]byte, 0, base64.RawURLEncoding.DecodedLen(len(h))), bytesOf(h))
	if err != nil {
		return compactJWS{}, errors.New("protected header is not unpadded base64url")
	}
	var hdr jwsHeader
	if err := readHeader(raw, &hdr); err != nil {
		return compactJWS{}, fmt.Errorf("protected header: %w", err)
	}
	switch {
	case !hdr.hasAlg:
		return compactJWS{}, errors.New(`protected header has no "alg"`)
	case hdr.b64 != nil && strings.TrimSpace(string(hdr.b64)) != "true":
		return compactJWS{}, errors.New(`protected header has "b64" other than true: an unencoded payload is no JWT`)
	case hdr.crit != nil && (!critB64(hdr.crit) || hdr.b64 == nil):
		return compactJWS{}, errors.New(`protected header has "crit" naming an extension not understood here (only ["b64"], with "b64": true)`)
	case !slices.Contains(algs, hdr.alg):
		return compactJWS{}, fmt.Errorf("algorithm %q is not allowed", hdr.alg)
	}
	sig, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return compactJWS{}, errors.New("signature is not unpadded base64url")
	}
	return compactJWS{alg: hdr.alg, kid: hdr.kid, signingInput: tok[:len(h)+1+len(p)], sig: sig}, nil
}

// critB64 reports whether a "crit" value is the list of "b64" alone.
func critB64(crit []byte) bool {
	l, ok := ijson.Strings(crit)
	return ok && len(l) == 1 && l[0] == "b64"
}

// verifyWith reports whether key signed the JWS under its algorithm.
func (j *compactJWS) verifyWith(key *jose.JSONWebKey) bool {
	if key.Algorithm != "" && key.Algorithm != j.alg {
		return false
	}
	switch j.alg {
	case "EdDSA":
		pub, ok := key.Key.(ed25519.PublicKey)
		return ok && ed25519.Verify(pub, bytesOf(j.signingInput), j.sig)
	case "ES256":
		return verifyECDSA(key.Key, elliptic.P256(), crypto.SHA256, j.signingInput, j.sig)
	case "ES384":
		return verifyECDSA(key.Key, elliptic.P384(), crypto.SHA384, j.signingInput, j.sig)
	case "ES512":
		return verifyECDSA(key.Key, elliptic.P521(), crypto.SHA512, j.signingInput, j.sig)
	}
	pub, ok := key.Key.(*rsa.PublicKey)
	if !ok {
		return false
	}
	var h crypto.Hash
	switch j.alg[2:] {
	case "256":
		h = crypto.SHA256
	case "384":
		h = crypto.SHA384
	case "512":
		h = crypto.SHA512
	}
	digest := hash(h, j.signingInput)
	switch j.alg[:2] {
	case "RS":
		return rsa.VerifyPKCS1v15(pub, h, digest, j.sig) == nil
	case "PS":
		return rsa.VerifyPSS(pub, h, digest, j.sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}) == nil
	}
	return false
}

func verifyECDSA(key any, curve elliptic.Curve, h crypto.Hash, signingInput string, sig []byte) bool {
	pub, ok := key.(*ecdsa.PublicKey)
	if !ok || pub.Curve != curve {
		return false
	}
	size := (curve.Params().BitSize + 7) / 8
	if len(sig) != 2*size {
		return false
	}
	r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
	return ecdsa.Verify(pub, hash(h, signingInput), r, s)
}

// hash digests the signing input.
func hash(h crypto.Hash, s string) []byte {
	b := bytesOf(s)
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(b)
		return d[:]
	case crypto.SHA384:
		d := sha512.Sum384(b)
		return d[:]
	default:
		d := sha512.Sum512(b)
		return d[:]
	}
}

// bytesOf is s's bytes without a copy, for functions that only read their
// argument (a digest, a signature check, a decoder's input): the signing
// input of a token up to 64 KiB is not copied for each verification.
// Nothing may write through the result.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s)) //nolint:gosec // audited: a read-only view of s, never written through (see above).
}
