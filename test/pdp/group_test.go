package pdp_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// rootOf reads a group-signed response's root (its signature is checked
// by decision.Verify, not here).
func rootOf(t *testing.T, resp []byte) (decision.Signed, decision.Root) {
	t.Helper()
	var s decision.Signed
	if err := json.Unmarshal(resp, &s); err != nil || s.RootJWS == "" || s.Proof == nil {
		t.Fatalf("not a group-signed response: %s", resp)
	}
	parts := strings.Split(s.RootJWS, ".")
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var r decision.Root
	_ = json.Unmarshal(b, &r)
	return s, r
}

// TestGroupCommitSigning: the real pdp, by default, signs checks that
// arrive together under one root — each answer verifying alone, with the
// project's verifier and with `callerauth decision verify` — and signs a
// lone check alone (a tree of one, an empty proof).
func TestGroupCommitSigning(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	const principal = "system:serviceaccount:secrets-engine:secrets-engine"
	p := startPDP(t, "enforce", iss.KubeconfigFile(), "secrets-engine="+principal)
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: "secrets-engine", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	allow, _ := os.ReadFile(filepath.Join(example, "check_request_allow_rotate.json"))
	var keys jose.JSONWebKeySet
	jb, _ := os.ReadFile(p.jwks)
	_ = json.Unmarshal(jb, &keys)

	// A lone check: a tree of one.
	code, lone := p.check(t, tok.Token, allow)
	if code != 200 {
		t.Fatalf("%d %s", code, lone)
	}
	s, root := rootOf(t, lone)
	if root.Records != 1 || s.Proof.Index != 0 || len(s.Proof.Hashes) != 0 {
		t.Errorf("a lone check: root of %d records, proof %+v; want a tree of one", root.Records, s.Proof)
	}
	if out, err := p.verify(t, lone, allow); err != nil || !strings.Contains(out, "verified: effect allow") {
		t.Errorf("callerauth decision verify, a lone check: %v\n%s", err, out)
	}

	// Concurrent checks: rounds of 32 at once until one root covers
	// several (scheduling decides how many overlap, never whether each
	// verifies).
	shared := 0
	for round := 0; round < 20 && shared == 0; round++ {
		const n = 32
		resps := make([][]byte, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, resps[i] = p.check(t, tok.Token, allow)
			}()
		}
		close(start)
		wg.Wait()
		for i, resp := range resps {
			if _, err := decision.Verify(resp, decision.VerifyOptions{Profile: pdp.RecordProfile, Keys: keys, Request: allow}); err != nil {
				t.Fatalf("round %d, check %d: %v\n%s", round, i, err, resp)
			}
			if _, r := rootOf(t, resp); r.Records > 1 {
				shared++
				if shared == 1 {
					if out, err := p.verify(t, resp, allow); err != nil || !strings.Contains(out, "verified: effect allow") {
						t.Errorf("callerauth decision verify, a check of a root of %d: %v\n%s", r.Records, err, out)
					}
					t.Logf("round %d: a root covers %d checks", round, r.Records)
				}
			}
		}
	}
	if shared == 0 {
		t.Error("20 rounds of 32 concurrent checks, and no root covered two")
	}
}
