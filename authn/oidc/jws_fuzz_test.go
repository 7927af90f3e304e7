package oidc

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// FuzzCompactAgainstGoJose holds the direct compact-JWS verifier to
// go-jose's: for any protected header and payload, signed by an ES256,
// RS256 or Ed25519 key and possibly damaged, a token the verifier accepts
// go-jose accepts with the same key and payload; and a token go-jose
// accepts the verifier accepts too, unless its header breaks a rule the
// verifier adds (I-JSON, no "crit" but ["b64"] with "b64": true, a payload: a JWT has claims). The one allowed difference the other
// way: go-jose also parses header members the verifier never uses (an
// embedded "jwk", "x5c", "typ", …) and refuses a token whose such member is
// malformed; the verifier ignores them, as no key or decision comes from
// them.
func FuzzCompactAgainstGoJose(f *testing.F) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	signers := []struct {
		key  crypto.Signer
		hash crypto.Hash
	}{{ec, crypto.SHA256}, {rk, crypto.SHA256}, {ed, 0}}
	for _, h := range []string{`{"alg":"ES256","kid":"k"}`, `{"alg":"RS256"}`, `{"alg":"EdDSA"}`, `{"alg":"ES256","alg":"none"}`, `{"alg":"ES256","crit":["exp"],"exp":1}`, `{"ALG":"ES256"}`, `{"alg":"RS256","jwk":{"kty":"oct","k":"AA"}}`, `{"alg":null}`, `{"alg":"PS256"}`, `[]`} {
		for k := range signers {
			f.Add([]byte(h), []byte(`{"sub":"x"}`), uint8(k), false, uint16(0))
			f.Add([]byte(h), []byte(`{"sub":"x"}`), uint8(k), false, uint16(2<<2|3)) // \n in the signature
		}
	}
	allowed := slicesOf(allowedAlgorithms)
	f.Fuzz(func(t *testing.T, header, payload []byte, which uint8, damage bool, ws uint16) {
		s := signers[int(which)%len(signers)]
		input := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
		var sig []byte
		var err error
		switch k := s.key.(type) {
		case *ecdsa.PrivateKey:
			d := sha256.Sum256([]byte(input))
			r, ss, e := ecdsa.Sign(rand.Reader, k, d[:])
			sig, err = append(r.FillBytes(make([]byte, 32)), ss.FillBytes(make([]byte, 32))...), e
		case *rsa.PrivateKey:
			d := sha256.Sum256([]byte(input))
			sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:])
		case ed25519.PrivateKey:
			sig = ed25519.Sign(k, []byte(input))
		}
		if err != nil {
			t.Fatal(err)
		}
		if damage {
			sig[len(sig)/2] ^= 1
		}
		tok := input + "." + base64.RawURLEncoding.EncodeToString(sig)
		// ws != 0 puts white space into the token: base64url in RFC 7515
		// has none, although Go's decoder skips \r and \n.
		if ws != 0 {
			// In the segment ws names (header, payload, signature: the
			// signature is where a skipped byte changes no signed input).
			segs := strings.Split(tok, ".")
			seg := int(ws>>2) % 3
			at := int(ws>>4) % (len(segs[seg]) + 1)
			segs[seg] = segs[seg][:at] + string(" \t\r\n"[ws&3]) + segs[seg][at:]
			tok = strings.Join(segs, ".")
		}
		key := jose.JSONWebKey{Key: s.key.Public()}

		ours := false
		// As Authenticate reads it: no skipped byte, the payload's base64
		// decoded (DecodePayload; that it is an object is another rule),
		// then the header and the signature.
		if _, p, _ := strings.Cut(tok, "."); noSkippedBytes(tok) && decodes(p) {
			if j, err := parseCompact(tok, allowedAlgorithms); err == nil {
				ours = j.verifyWith(&key)
				if !compactAlphabet(tok) {
					t.Fatalf("parsed %q, which holds a byte outside base64url", tok)
				}
			}
		}
		theirs := false
		if jws, err := jose.ParseSignedCompact(tok, allowed); err == nil {
			got, err := jws.Verify(key.Key)
			theirs = err == nil
			if theirs && string(got) != string(payload) {
				t.Fatalf("go-jose verified another payload: %q", got)
			}
		}
		if ws != 0 && ours {
			t.Fatalf("accepted a token with white space in it: %q", tok)
		}
		if ours && !theirs && !goJoseReadsMore(header) {
			t.Fatalf("accepted %s, which go-jose refuses", tok)
		}
		var hdr jwsHeader
		strict := ws == 0 && len(payload) > 0 && ijson.Check(header) == nil && readHeader(header, &hdr) == nil && hdr.crit == nil
		if theirs && !ours && strict {
			t.Fatalf("refused %s (header %q), which go-jose accepts", tok, header)
		}
		if damage && ours {
			t.Fatalf("accepted a damaged signature: %s", tok)
		}
	})
}

// decodes reports whether the payload segment of rest (payload.signature)
// is unpadded base64url, as token.DecodePayload decodes it.
func decodes(rest string) bool {
	p, _, _ := strings.Cut(rest, ".")
	_, err := base64.RawURLEncoding.DecodeString(p)
	return err == nil
}

func slicesOf(algs []string) []jose.SignatureAlgorithm {
	out := make([]jose.SignatureAlgorithm, len(algs))
	for i, a := range algs {
		out[i] = jose.SignatureAlgorithm(a)
	}
	return out
}

// goJoseReadsMore reports whether the header has a member go-jose parses
// and the verifier ignores.
func goJoseReadsMore(header []byte) bool {
	more := false
	_ = ijson.Members(header, func(name, _ []byte) error {
		switch string(name) {
		case "alg", "kid", "crit":
		default:
			more = true
		}
		return nil
	})
	return more
}
