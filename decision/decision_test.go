package decision_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/kit/forge"
)

// profile is the record format these tests sign and verify.
var profile = decision.Profile{Schema: "test.decision-record.v1", Type: "test-decision+jwt"}

var request = []byte(`{"system":"secrets-engine","subject":"svc-rotator","tenant":"acme","lane":"catalog","resource":"db-password","stage":"rotate","fields":["password"],"purpose":"scheduled rotation"}`)

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func record(t testing.TB, decidedAt time.Time, req []byte) *decision.Record {
	t.Helper()
	var r decision.Record
	var body map[string]any
	if err := json.Unmarshal(req, &body); err != nil {
		t.Fatal(err)
	}
	if err := r.Bind(body); err != nil {
		t.Fatal(err)
	}
	issued, expires := decidedAt.Add(-time.Minute), decidedAt.Add(9*time.Minute)
	r.DecisionID, r.Effect, r.Reason, r.PolicyVersion = "d-1", decision.Allow, "catalog_lane_policy_matched", "v2"
	r.Provenance = decision.Provenance{Evaluator: "cedar-go v1.9.1", Mode: "enforce", PolicyPackageID: "secrets-engine", DecidedAt: decidedAt}
	r.Caller = decision.Caller{Authenticated: true, Principal: "system:serviceaccount:secrets-engine:secrets-engine", Audiences: []string{"flex-auth"},
		TokenIssuedAt: &issued, TokenExpiresAt: &expires, AuthenticatedBy: "TokenReview", CredentialID: "JTI=x"}
	return &r
}

func sign(t testing.TB, s *decision.Signer, r *decision.Record) []byte {
	t.Helper()
	out, err := s.Sign(r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSignAndVerify(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	s, err := decision.NewSigner(profile, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	resp := sign(t, s, record(t, now, request))
	r, err := decision.Verify(resp, decision.VerifyOptions{Profile: profile, Keys: s.JWKS(), Request: request, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Effect != decision.Allow || r.Caller.Principal != "system:serviceaccount:secrets-engine:secrets-engine" || r.Schema != profile.Schema ||
		!strings.HasPrefix(r.RequestDigest, "sha256:") || !r.Provenance.DecidedAt.Equal(now) {
		t.Fatalf("record %+v", r)
	}
	// The JWS header: alg, kid (RFC 7638 thumbprint) and typ.
	var out decision.Signed
	_ = json.Unmarshal(resp, &out)
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(out.RecordJWS, ".")[0])
	var h map[string]string
	_ = json.Unmarshal(hdr, &h)
	if h["alg"] != "ES256" || h["typ"] != profile.Type || h["kid"] != thumbprint(t, s) {
		t.Fatalf("header %v; want kid %s", h, thumbprint(t, s))
	}
}

// thumbprint computes RFC 7638 by hand: SHA-256 over the required members
// in lexicographic order, no white space.
func thumbprint(t *testing.T, s *decision.Signer) string {
	k := s.JWKS().Keys[len(s.JWKS().Keys)-1]
	raw, err := k.Key.(*ecdsa.PublicKey).Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	x, y := raw[1:33], raw[33:]
	sum := sha256.Sum256([]byte(fmt.Sprintf(`{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}`, enc(x), enc(y))))
	return enc(sum[:])
}

func TestVerifyFailsClosed(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { return now }
	s, _ := decision.NewSigner(profile, newKey(t))
	other, _ := decision.NewSigner(profile, newKey(t))
	good := sign(t, s, record(t, now, request))
	var parts decision.Signed
	_ = json.Unmarshal(good, &parts)

	tamperedCopy := strings.Replace(string(good), `\"effect\":\"allow\"`, `\"effect\":\"deny\"`, 1)
	if tamperedCopy == string(good) {
		// The record is embedded as raw JSON, not a string.
		tamperedCopy = strings.Replace(string(good), `"effect":"allow"`, `"effect":"deny"`, 1)
	}
	jwsParts := strings.Split(parts.RecordJWS, ".")
	forgedPayload, _ := json.Marshal(decision.Signed{RecordJWS: jwsParts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"schema":"`+profile.Schema+`","effect":"allow"}`)) + "." + jwsParts[2]})
	otherKey := sign(t, other, record(t, now, request))
	// A key that claims the published kid.
	impostor, _ := decision.NewSigner(profile, newKey(t))
	impostorJWS := resign(t, impostor, record(t, now, request), s.KeyID())
	otherRequest := []byte(strings.Replace(string(request), "db-password", "root-ca-key", 1))
	replayed := sign(t, s, record(t, now, otherRequest))
	algNone, _ := json.Marshal(decision.Signed{RecordJWS: forge.AlgNone(map[string]any{"effect": "allow"}, s.KeyID())})
	hs256, _ := json.Marshal(decision.Signed{RecordJWS: forge.HS256WithPublicKey(map[string]any{"effect": "allow"}, s.JWKS().Keys[0].Key, s.KeyID())})
	unsigned, _ := json.Marshal(map[string]any{"record": json.RawMessage(parts.Record)})
	// Two record_jws members: a reader keeping the first and one keeping
	// the last would verify different records.
	twoJWS := []byte(`{"record_jws":"` + parts.RecordJWS + `","record_jws":"` + parts.RecordJWS + `"}`)

	tests := []struct {
		name string
		resp []byte
		now  time.Time
		want error
	}{
		{"unsigned: the record alone", unsigned, now, decision.ErrUnsigned},
		{"not JSON", []byte("<html>"), now, decision.ErrUnsigned},
		{"a member name twice in the response", twoJWS, now, decision.ErrUnsigned},
		{"the unsigned copy was changed", []byte(tamperedCopy), now, decision.ErrSignature},
		{"the signed payload was changed", forgedPayload, now, decision.ErrSignature},
		{"signed by a key not published", otherKey, now, decision.ErrUnknownKey},
		{"signed by another key under the published kid", impostorJWS, now, decision.ErrSignature},
		{"alg none", algNone, now, decision.ErrSignature},
		{"HS256 keyed with the public key", hs256, now, decision.ErrSignature},
		{"a record for another request (replay)", replayed, now, decision.ErrRequestMismatch},
		{"stale", good, now.Add(6 * time.Minute), decision.ErrStale},
		{"from the future", good, now.Add(-time.Minute), decision.ErrStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.now
			r, err := decision.Verify(tt.resp, decision.VerifyOptions{Profile: profile, Keys: s.JWKS(), Request: request, Now: func() time.Time { return at }})
			if !errors.Is(err, tt.want) || r != nil {
				t.Fatalf("Verify = %v, %v; want %v", r, err, tt.want)
			}
		})
	}
	if _, err := decision.Verify(good, decision.VerifyOptions{Profile: profile, Keys: s.JWKS(), Request: request, Now: clock}); err != nil {
		t.Fatalf("the good record: %v", err)
	}
	// The request the consumer holds must be I-JSON too: with a member
	// twice, or a character rewritten on the way, it is not the request the
	// record binds, whichever duplicate the PDP kept.
	for name, req := range map[string]string{
		"system twice":                 `{"system":"secrets-engine",` + string(request[1:len(request)-1]) + `}`,
		"fields twice, the last bound": strings.Replace(string(request), `"fields":["password"]`, `"fields":["private_key"],"fields":["password"]`, 1),
		"a lone surrogate":             strings.Replace(string(request), `scheduled rotation`, `scheduled rotation\ud800`, 1),
		"invalid UTF-8":                strings.Replace(string(request), `scheduled rotation`, "scheduled rotation\xff", 1),
	} {
		if _, err := decision.Verify(good, decision.VerifyOptions{Profile: profile, Keys: s.JWKS(), Request: []byte(req), Now: clock}); !errors.Is(err, decision.ErrRequestMismatch) {
			t.Errorf("%s: Verify = %v, want ErrRequestMismatch", name, err)
		}
	}
}

// resign signs with impostor but puts kid in the header.
func resign(t *testing.T, impostor *decision.Signer, r *decision.Record, kid string) []byte {
	t.Helper()
	out, err := impostor.Sign(r)
	if err != nil {
		t.Fatal(err)
	}
	p := strings.Split(out.RecordJWS, ".")
	hdr, _ := base64.RawURLEncoding.DecodeString(p[0])
	hdr = []byte(strings.Replace(string(hdr), impostor.KeyID(), kid, 1))
	out.RecordJWS = base64.RawURLEncoding.EncodeToString(hdr) + "." + p[1] + "." + p[2]
	b, _ := json.Marshal(out)
	return b
}

func TestKeyRotation(t *testing.T) {
	now := time.Now().UTC()
	oldKey, newKey := newKey(t), newKey(t)
	before, _ := decision.NewSigner(profile, oldKey)
	after, err := decision.NewSigner(profile, oldKey, newKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.JWKS().Keys) != 2 || after.KeyID() == before.KeyID() {
		t.Fatal("the newest key does not sign, or the old one is not published")
	}
	// A record signed before the rotation verifies against the new JWKS.
	if _, err := decision.Verify(sign(t, before, record(t, now, request)), decision.VerifyOptions{Profile: profile, Keys: after.JWKS()}); err != nil {
		t.Fatal(err)
	}
	// And a new record verifies too.
	if _, err := decision.Verify(sign(t, after, record(t, now, request)), decision.VerifyOptions{Profile: profile, Keys: after.JWKS()}); err != nil {
		t.Fatal(err)
	}
}

func TestEd25519(t *testing.T) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	s, err := decision.NewSigner(profile, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decision.Verify(sign(t, s, record(t, time.Now(), request)), decision.VerifyOptions{Profile: profile, Keys: s.JWKS()}); err != nil {
		t.Fatal(err)
	}
	if _, err := decision.NewSigner(profile, mustP384(t)); err == nil {
		t.Fatal("a P-384 key was accepted")
	}
}

func mustP384(t *testing.T) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "signing.pem")
	if err := decision.GenerateKeyFile(p); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	if err := decision.GenerateKeyFile(p); err == nil {
		t.Fatal("overwrote an existing key")
	}
	keys, err := decision.LoadKeyFile(p)
	if err != nil || len(keys) != 1 {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
	// An Ed25519 key file signs EdDSA records that verify.
	ed := filepath.Join(t.TempDir(), "eddsa.pem")
	if err := decision.GenerateKeyFileFor(jose.EdDSA, ed); err != nil {
		t.Fatal(err)
	}
	edKeys, err := decision.LoadKeyFile(ed)
	if err != nil || len(edKeys) != 1 {
		t.Fatalf("%d keys, %v", len(edKeys), err)
	}
	s, err := decision.NewSigner(profile, edKeys...)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.JWKS().Keys[0].Algorithm; got != "EdDSA" {
		t.Fatalf("alg %q", got)
	}
	if _, err := decision.Verify(sign(t, s, record(t, time.Now(), request)), decision.VerifyOptions{Profile: profile, Keys: s.JWKS()}); err != nil {
		t.Fatal(err)
	}
	if err := decision.GenerateKeyFileFor("RS256", filepath.Join(t.TempDir(), "rsa.pem")); err == nil || !strings.Contains(err.Error(), "ES256 or EdDSA") {
		t.Fatalf("RS256: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	_ = os.WriteFile(empty, []byte("nothing"), 0o600)
	if _, err := decision.LoadKeyFile(empty); err == nil || !strings.Contains(err.Error(), "empty.pem") {
		t.Fatalf("empty: %v", err)
	}
}
