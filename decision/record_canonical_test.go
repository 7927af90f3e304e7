package decision

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func recordVariants() []*Record {
	t1 := time.Date(2026, 11, 30, 13, 0, 0, 123456789, time.UTC)
	t2 := time.Date(2027, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	full := &Record{Schema: "s.v2", DecisionID: "d-1", Effect: Allow, Reason: "r<&>\u2028é😀", PolicyVersion: "v2", RequestDigest: "sha256:ab",
		Provenance: Provenance{Evaluator: "cedar", Mode: "enforce", PolicyPackageID: "p", PolicyPackageDigest: "sha256:1", RegistrySnapshotDigest: "sha256:2", DecidedAt: t1},
		Caller: Caller{Authenticated: true, Principal: "system:serviceaccount:a:b", UID: "u", CredentialID: "JTI=x", PodName: "p\"o\\d", PodUID: "pu",
			Audiences: []string{"flex-auth", "\t"}, TokenIssuedAt: &t1, TokenExpiresAt: &t2, AuthenticatedBy: "TokenReview"}}
	_ = full.Bind(map[string]any{"system": "secrets-engine", "fields": []string{"password"}, "n": 1.5})
	bare := &Record{Caller: Caller{Reason: "token_missing"}}
	raw := &Record{Binding: json.RawMessage(`{"b": 2, "a": [1, "x"]}`), Effect: Deny}
	return []*Record{full, bare, raw, {}}
}

// TestRecordCanonical: the direct writer equals the reflective canonical
// form for every shape of record.
func TestRecordCanonical(t *testing.T) {
	for i, r := range recordVariants() {
		want, err := CanonicalJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.canonical()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// FuzzRecordCanonical: any strings in any member, same bytes.
func FuzzRecordCanonical(f *testing.F) {
	f.Add("a", "b", "c", "d", "e", true, int64(0))
	f.Add("\u0000\u001f\"\\", "é😀", "<>&", "\u2028\u2029", "", false, int64(1e18))
	f.Fuzz(func(t *testing.T, s1, s2, s3, s4, s5 string, auth bool, ns int64) {
		at := time.Unix(0, ns).UTC()
		r := &Record{Schema: s1, DecisionID: s2, Effect: s3, Reason: s4, PolicyVersion: s5, RequestDigest: s1 + s2,
			Provenance: Provenance{Evaluator: s3, Mode: s4, PolicyPackageID: s5, PolicyPackageDigest: s1, RegistrySnapshotDigest: s2, DecidedAt: at},
			Caller:     Caller{Authenticated: auth, Principal: s1, UID: s2, CredentialID: s3, PodName: s4, PodUID: s5, Audiences: []string{s1, s2}, Reason: s3, AuthenticatedBy: s4, TokenIssuedAt: &at}}
		if err := r.Bind(map[string]string{s1: s2}); err != nil {
			return // not I-JSON (invalid UTF-8): CanonicalJSON refuses it too
		}
		want, err := CanonicalJSON(r)
		if err != nil {
			return
		}
		got, err := r.canonical()
		if err != nil {
			t.Fatalf("canonical: %v (CanonicalJSON succeeded)", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// TestEvaluationRecordCanonical: the direct writer equals the reflective
// canonical form.
func TestEvaluationRecordCanonical(t *testing.T) {
	for _, r := range recordVariants() {
		e := &EvaluationRecord{Schema: r.Schema, DecisionID: r.DecisionID, PolicyVersion: r.PolicyVersion, Evaluations: len(r.Reason),
			Endpoint: "evaluations", Semantic: r.Reason, Requested: 2 * len(r.Reason), RequestID: r.PolicyVersion + "\u2028é",
			Ignored: []string{r.DecisionID, "options.another_option"}, MerkleRoot: "sha256:" + r.Reason, Provenance: r.Provenance, Caller: r.Caller}
		want, err := CanonicalJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.canonical()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	}
}

// TestRootCanonical: the root written directly is CanonicalJSON's, byte
// for byte, whatever its time (nanoseconds, whole seconds, another zone)
// and schema (escaping included).
func TestRootCanonical(t *testing.T) {
	for _, r := range []Root{
		{Schema: "flex-auth.decision.v2.root", MerkleRoot: "sha256:00ff", Records: 1, SignedAt: time.Date(2026, 12, 1, 22, 40, 0, 123456789, time.UTC)},
		{Schema: "a\"b\\c<>&\u2028", MerkleRoot: "sha256:", Records: 64, SignedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{Schema: "s", MerkleRoot: "x", Records: 0, SignedAt: time.Date(2026, 6, 1, 0, 0, 0, 1000, time.FixedZone("x", 3600))},
	} {
		want, err := CanonicalJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.canonical()
		if err != nil || string(got) != string(want) {
			t.Errorf("%+v:\n got %s %v\nwant %s", r, got, err, want)
		}
	}
}
