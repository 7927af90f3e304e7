package authn_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn"
)

// recheckWorld is a Recheck over a fake offline verifier (a token "x"
// or "x#n" is service account x, jti x: tokens "a#1" and "a#2" carry one
// jti; "bad" and the retired ones are refused) and a counting reviewer that
// can revoke tokens and rename identities.
type recheckWorld struct {
	r       *authn.Recheck
	reviews atomic.Int64
	revoked map[string]bool
	retired map[string]bool
	renamed map[string]string // token → the identity TokenReview gives
	now     time.Time
}

func newRecheckWorld(t *testing.T, interval time.Duration, max int) *recheckWorld {
	w := &recheckWorld{revoked: map[string]bool{}, retired: map[string]bool{}, renamed: map[string]string{}, now: time.Unix(1_800_000_000, 0)}
	identity := func(tok string) string {
		name, _, _ := strings.Cut(tok, "#")
		return "system:serviceaccount:ns:" + name
	}
	offline := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		if tok == "bad" || w.retired[tok] {
			return nil, authn.Fail(authn.TokenInvalid, "signature")
		}
		name, _, _ := strings.Cut(tok, "#")
		return &authn.Caller{Username: identity(tok), Issuer: "https://kubernetes.default.svc", CredentialID: "JTI=" + name, Groups: []string{"offline"}}, nil
	})
	review := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		w.reviews.Add(1)
		if w.revoked[tok] {
			return nil, authn.Fail(authn.TokenInvalid, "pod deleted")
		}
		who := identity(tok)
		if r, ok := w.renamed[tok]; ok {
			who = r
		}
		return &authn.Caller{Username: who, Groups: []string{"reviewed"}}, nil
	})
	var err error
	w.r, err = authn.NewRecheck(authn.RecheckConfig{Offline: authn.Layer{Authenticator: offline}, Review: authn.Layer{Authenticator: review}, Interval: interval, MaxEntries: max, Now: func() time.Time { return w.now }})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// ask returns the identity answered, or an error.
func (w *recheckWorld) ask(t *testing.T, tok string) (string, error) {
	t.Helper()
	c, err := w.r.Authenticate(context.Background(), tok)
	if err != nil {
		return "", err
	}
	return c.Username, nil
}

// TestRecheck: a token is reviewed at first sight and once per interval;
// in between it is verified offline and answered with the identity
// TokenReview gave; a revoked one is refused at its next review and
// reviewed every time after; a token the offline verifier refuses is never
// reviewed.
func TestRecheck(t *testing.T) {
	w := newRecheckWorld(t, 10*time.Minute, 0)
	if who, err := w.ask(t, "a"); err != nil || who != "system:serviceaccount:ns:a" || w.reviews.Load() != 1 {
		t.Fatalf("first sight: %q %v, %d reviews", who, err, w.reviews.Load())
	}
	for range 50 {
		w.now = w.now.Add(10 * time.Second)
		if who, err := w.ask(t, "a"); err != nil || who != "system:serviceaccount:ns:a" {
			t.Fatalf("within the interval: %q %v; want the reviewed identity", who, err)
		}
	}
	if w.reviews.Load() != 1 {
		t.Fatalf("%d reviews within the interval; want 1", w.reviews.Load())
	}
	// The pod is deleted: accepted until the interval runs out, not after.
	w.revoked["a"] = true
	w.now = w.now.Add(9*time.Minute + 40*time.Second - 50*10*time.Second)
	if _, err := w.ask(t, "a"); err != nil {
		t.Fatalf("still within the interval: %v", err)
	}
	w.now = w.now.Add(30 * time.Second) // 10 min 10 s after the review
	if _, err := w.ask(t, "a"); authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("past the interval: %v; want token_invalid", err)
	}
	if _, err := w.ask(t, "a"); authn.ReasonOf(err) != authn.TokenInvalid || w.reviews.Load() != 3 {
		t.Fatalf("a revoked token is reviewed again, never offline: %v, %d reviews", err, w.reviews.Load())
	}
	if _, err := w.ask(t, "bad"); authn.ReasonOf(err) != authn.TokenInvalid || w.reviews.Load() != 3 {
		t.Fatalf("an offline refusal: %v, %d reviews", err, w.reviews.Load())
	}
	if s := w.r.Stats(); s.Reviews != 3 || s.Offline != 51 || s.Refusals != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRecheckVouchesForOneToken: a review vouches for the token reviewed,
// not for its jti (which is not secret): another token carrying a reviewed
// jti is reviewed itself — and refused when TokenReview refuses it (a pod
// that never existed) — where before it was accepted with no review.
func TestRecheckVouchesForOneToken(t *testing.T) {
	w := newRecheckWorld(t, 10*time.Minute, 0)
	if _, err := w.ask(t, "a#1"); err != nil {
		t.Fatal(err)
	}
	w.revoked["a#2"] = true // same jti, a token TokenReview refuses
	if _, err := w.ask(t, "a#2"); authn.ReasonOf(err) != authn.TokenInvalid || w.reviews.Load() != 2 {
		t.Fatalf("a second token with a reviewed jti: %v after %d reviews; want token_invalid after its own review", err, w.reviews.Load())
	}
	if who, err := w.ask(t, "a#1"); err != nil || who != "system:serviceaccount:ns:a" || w.reviews.Load() != 2 {
		t.Fatalf("the reviewed token: %q %v, %d reviews", who, err, w.reviews.Load())
	}
}

// TestRecheckIdentityIsTheReviewed: an offline identity that differs from
// the one TokenReview returns for the token is refused and counted.
func TestRecheckIdentityIsTheReviewed(t *testing.T) {
	w := newRecheckWorld(t, 10*time.Minute, 0)
	w.renamed["b"] = "system:serviceaccount:kube-system:admin-sa"
	if _, err := w.ask(t, "b"); authn.ReasonOf(err) != authn.TokenInvalid || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("identities differ: %v", err)
	}
	if _, err := w.ask(t, "b"); authn.ReasonOf(err) != authn.TokenInvalid || w.reviews.Load() != 2 {
		t.Fatalf("a refused mismatch vouches for nothing: %v, %d reviews", err, w.reviews.Load())
	}
	if s := w.r.Stats(); s.Mismatches != 2 {
		t.Fatalf("mismatches %d", s.Mismatches)
	}
}

// TestRecheckForgetsWhenTheKeyGoes: once the offline verifier refuses a
// token (its key left the JWKS), its review is forgotten: accepted again
// offline later, it is reviewed again.
func TestRecheckForgetsWhenTheKeyGoes(t *testing.T) {
	w := newRecheckWorld(t, 10*time.Minute, 0)
	if _, err := w.ask(t, "c"); err != nil {
		t.Fatal(err)
	}
	w.retired["c"] = true
	if _, err := w.ask(t, "c"); authn.ReasonOf(err) != authn.TokenInvalid || w.r.Remembered() != 0 {
		t.Fatalf("key retired: %v, %d remembered", err, w.r.Remembered())
	}
	w.retired["c"] = false
	if _, err := w.ask(t, "c"); err != nil || w.reviews.Load() != 2 {
		t.Fatalf("after the key came back: %v, %d reviews; want a fresh review", err, w.reviews.Load())
	}
}

// TestRecheckRefusalNotOverwritten: a slow successful review and a fast
// refusal of one token overlap; the refusal started last and wins, and the
// next request is reviewed again — before, the late success landed over the
// refusal and the next request was accepted with no review.
func TestRecheckRefusalNotOverwritten(t *testing.T) {
	var reviews atomic.Int64
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	offline := authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) {
		return &authn.Caller{Username: "u"}, nil
	})
	review := authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) {
		if reviews.Add(1) == 1 { // the first review: slow, and a success
			started <- struct{}{}
			<-release
			return &authn.Caller{Username: "u"}, nil
		}
		return nil, authn.Fail(authn.TokenInvalid, "pod deleted")
	})
	r, err := authn.NewRecheck(authn.RecheckConfig{Offline: authn.Layer{Authenticator: offline}, Review: authn.Layer{Authenticator: review}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() { _, err := r.Authenticate(context.Background(), "tok"); slow <- err }()
	<-started
	if _, err := r.Authenticate(context.Background(), "tok"); authn.ReasonOf(err) != authn.TokenInvalid {
		t.Fatalf("the fast review: %v", err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the slow review: %v", err)
	}
	if _, err := r.Authenticate(context.Background(), "tok"); authn.ReasonOf(err) != authn.TokenInvalid || reviews.Load() != 3 {
		t.Fatalf("after both: %v after %d reviews; want the refusal to stand and a third review", err, reviews.Load())
	}
}

// TestRecheckBounded: a full table drops lapsed reviews first, then the
// oldest; it never grows past its bound.
func TestRecheckBounded(t *testing.T) {
	w := newRecheckWorld(t, time.Minute, 100)
	for i := range 1000 {
		w.now = w.now.Add(100 * time.Millisecond)
		if _, err := w.ask(t, "t"+string(rune('a'+i%26))+strings.Repeat("x", i%40)+string(rune(i))); err != nil {
			t.Fatal(err)
		}
		if n := w.r.Remembered(); n > 100 {
			t.Fatalf("%d remembered; bound 100", n)
		}
	}
}

// TestRecheckBoundedUnderRefusals: refusals are remembered too (so that a
// late success cannot land over them), within the same bound.
func TestRecheckBoundedUnderRefusals(t *testing.T) {
	w := newRecheckWorld(t, time.Minute, 100)
	for i := range 1000 {
		tok := "r#" + strconv.Itoa(i)
		w.revoked[tok] = true
		w.now = w.now.Add(10 * time.Millisecond)
		if _, err := w.ask(t, tok); authn.ReasonOf(err) != authn.TokenInvalid {
			t.Fatal(err)
		}
		if n := w.r.Remembered(); n > 100 {
			t.Fatalf("%d remembered; bound 100", n)
		}
	}
}

func TestNewRecheckRefusals(t *testing.T) {
	ok := authn.Layer{Authenticator: authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) { return &authn.Caller{}, nil })}
	for _, cfg := range []authn.RecheckConfig{{Review: ok, Interval: time.Minute}, {Offline: ok, Interval: time.Minute}, {Offline: ok, Review: ok}} {
		if _, err := authn.NewRecheck(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
