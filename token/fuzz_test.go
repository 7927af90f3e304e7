package token_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/token"
)

// FuzzExpiry feeds arbitrary strings to the unverified JWT payload parser.
// It must never panic, and whatever it decides, the expiry check must either
// send the token unchanged or refuse it with an *ExpiredError.
func FuzzExpiry(f *testing.F) {
	for _, s := range []string{
		"",
		"opaque",
		"a.b.c",
		"..",
		"a..c",
		jwt(`{"exp":1700000000}`),
		jwt(`{"exp":1700000000.999999999}`),
		jwt(`{"exp":-1}`),
		jwt(`{"exp":1e400}`),
		jwt(`{"exp":"1"}`),
		jwt(`{"exp":{"a":1}}`),
		jwt(`{"exp":1,"exp":2}`),
		jwt(`{"kubernetes.io":{"namespace":"ns"},"exp":9999999999}`),
		jwt("\xff\xfe"),
		jwt(`[]`),
		jwt(`{`),
		"eyJhbGciOiJub25lIn0.eyJleHAiOjF9.",
		"a.b.c.d.e",
	} {
		f.Add(s)
	}
	now := time.Unix(1750000000, 0)
	f.Fuzz(func(t *testing.T, tok string) {
		exp, ok := token.Expiry(tok)
		if ok && strings.Count(tok, ".") != 2 {
			t.Fatalf("Expiry(%q) ok for a token with %d dots", tok, strings.Count(tok, "."))
		}
		got, err := token.CheckExpiry(token.StaticSource(tok), token.WithClock(func() time.Time { return now })).Token(context.Background())
		switch {
		case tok == "":
			if err == nil {
				t.Fatal("empty token accepted")
			}
		case ok && !now.Before(exp):
			if err == nil {
				t.Fatalf("expired token (exp %v) sent", exp)
			}
		default:
			if err != nil || got != tok {
				t.Fatalf("Token() = %q, %v; want the token unchanged", got, err)
			}
		}
	})
}
