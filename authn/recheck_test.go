package authn_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/authn"
)

// recheckWorld is a Recheck over a fake offline verifier (a token is
// "jti" or "bad") and a counting reviewer that can revoke credentials.
type recheckWorld struct {
	r       *authn.Recheck
	reviews atomic.Int64
	revoked map[string]bool
	now     time.Time
}

func newRecheckWorld(t *testing.T, interval time.Duration, max int) *recheckWorld {
	w := &recheckWorld{revoked: map[string]bool{}, now: time.Unix(1_800_000_000, 0)}
	offline := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		if tok == "bad" {
			return nil, authn.Fail(authn.TokenInvalid, "signature")
		}
		id := ""
		if !strings.HasPrefix(tok, "nojti") {
			id = "JTI=" + tok
		}
		return &authn.Caller{Username: "offline", Issuer: "https://kubernetes.default.svc", CredentialID: id}, nil
	})
	review := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		w.reviews.Add(1)
		if w.revoked[tok] {
			return nil, authn.Fail(authn.TokenInvalid, "pod deleted")
		}
		return &authn.Caller{Username: "reviewed"}, nil
	})
	var err error
	w.r, err = authn.NewRecheck(authn.RecheckConfig{Offline: offline, Review: review, Interval: interval, MaxEntries: max, Now: func() time.Time { return w.now }})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *recheckWorld) ask(t *testing.T, tok string) (string, error) {
	t.Helper()
	c, err := w.r.Authenticate(context.Background(), tok)
	if err != nil {
		return "", err
	}
	return c.Username, nil
}

// TestRecheck: a credential is reviewed at first sight and once per
// interval; in between it is verified offline only; a revoked one is
// refused at its next review and reviewed every time after; a token the
// offline verifier refuses is never reviewed; a token without a
// credential id is reviewed every time.
func TestRecheck(t *testing.T) {
	w := newRecheckWorld(t, 10*time.Minute, 0)
	if who, err := w.ask(t, "a"); err != nil || who != "reviewed" || w.reviews.Load() != 1 {
		t.Fatalf("first sight: %q %v, %d reviews", who, err, w.reviews.Load())
	}
	for range 50 {
		w.now = w.now.Add(10 * time.Second)
		if who, err := w.ask(t, "a"); err != nil || who != "offline" {
			t.Fatalf("within the interval: %q %v", who, err)
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
		t.Fatalf("a revoked credential is reviewed again, never offline: %v, %d reviews", err, w.reviews.Load())
	}
	if _, err := w.ask(t, "bad"); authn.ReasonOf(err) != authn.TokenInvalid || w.reviews.Load() != 3 {
		t.Fatalf("an offline refusal: %v, %d reviews", err, w.reviews.Load())
	}
	for range 3 {
		if who, _ := w.ask(t, "nojti"); who != "reviewed" {
			t.Fatalf("without a credential id: %q", who)
		}
	}
	if w.reviews.Load() != 6 {
		t.Fatalf("%d reviews; want one per request without a credential id", w.reviews.Load())
	}
	if s := w.r.Stats(); s.Reviews != 6 || s.Offline != 51 || s.Refusals != 1 {
		t.Fatalf("stats %+v", s)
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

func TestNewRecheckRefusals(t *testing.T) {
	ok := authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) { return &authn.Caller{}, nil })
	for _, cfg := range []authn.RecheckConfig{{Review: ok, Interval: time.Minute}, {Offline: ok, Interval: time.Minute}, {Offline: ok, Review: ok}} {
		if _, err := authn.NewRecheck(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
