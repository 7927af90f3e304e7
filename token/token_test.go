package token_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/kit/tokenvolume"
	"github.com/callerauth/callerauth/token"
)

// jwt builds an unsigned compact JWS with the given JSON payload. The
// signature segment is junk: the expiry check never verifies it.
func jwt(payload string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"ES256","kid":"k1"}`)) + "." +
		enc.EncodeToString([]byte(payload)) + ".c2lnbmF0dXJl"
}

func TestExpiry(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	tests := []struct {
		name   string
		tok    string
		want   time.Time
		wantOK bool
	}{
		{"integer exp", jwt(`{"exp":1700000000,"sub":"x"}`), time.Unix(1700000000, 0), true},
		{"fractional exp", jwt(`{"exp":1700000000.5}`), time.Unix(1700000000, 5e8), true},
		{"exponent form", jwt(`{"exp":1.7e9}`), time.Unix(1700000000, 0), true},
		{"no exp", jwt(`{"sub":"x"}`), time.Time{}, false},
		{"null exp", jwt(`{"exp":null}`), time.Time{}, false},
		{"string exp", jwt(`{"exp":"1700000000"}`), time.Time{}, false},
		{"payload is an array", jwt(`[1,2]`), time.Time{}, false},
		{"payload not JSON", jwt(`not json`), time.Time{}, false},
		{"payload not base64url", "aGVhZA.***.c2ln", time.Time{}, false},
		{"padded base64", "aGVhZA." + base64.URLEncoding.EncodeToString([]byte(`{"exp":10}`)) + ".c2ln", time.Time{}, false},
		{"opaque token", "s3cr3t-opaque-token", time.Time{}, false},
		{"two segments", "a." + enc([]byte(`{"exp":1}`)), time.Time{}, false},
		{"four segments (JWE-like)", "a." + enc([]byte(`{"exp":1}`)) + ".c.d", time.Time{}, false},
		{"empty header segment", "." + enc([]byte(`{"exp":1}`)) + ".c", time.Time{}, false},
		{"empty payload segment", "a..c", time.Time{}, false},
		{"empty signature is still a JWS shape", "a." + enc([]byte(`{"exp":1}`)) + ".", time.Unix(1, 0), true},
		{"infinite exp", jwt(`{"exp":1e400}`), time.Time{}, false},
		{"empty", "", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := token.Expiry(tt.tok)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Fatalf("Expiry() = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestCheckExpiryEdges(t *testing.T) {
	exp := time.Unix(1800000000, 0)
	tok := jwt(fmt.Sprintf(`{"exp":%d}`, exp.Unix()))
	tests := []struct {
		name        string
		now         time.Time
		wantExpired bool
	}{
		{"1ns before exp is sent", exp.Add(-time.Nanosecond), false},
		{"at exp is refused", exp, true},
		{"1ns after exp is refused", exp.Add(time.Nanosecond), true},
		{"an hour after is refused", exp.Add(time.Hour), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := token.CheckExpiry(token.Static(tok), token.WithClock(func() time.Time { return tt.now }))
			got, err := src.Token(context.Background())
			if !tt.wantExpired {
				if err != nil || got != tok {
					t.Fatalf("Token() = %q, %v; want the token", got, err)
				}
				return
			}
			if got != "" {
				t.Fatalf("Token() returned a token for an expired JWT")
			}
			var ee *token.ExpiredError
			if !errors.As(err, &ee) {
				t.Fatalf("Token() error = %v; want *ExpiredError", err)
			}
			if !errors.Is(err, token.ErrExpired) {
				t.Errorf("errors.Is(err, ErrExpired) = false")
			}
			if !ee.Expiry.Equal(exp) || !ee.Now.Equal(tt.now) {
				t.Errorf("ExpiredError = %+v; want Expiry %v Now %v", ee, exp, tt.now)
			}
		})
	}
}

func TestCheckExpiryPassesThrough(t *testing.T) {
	late := func() time.Time { return time.Unix(4000000000, 0) }
	for _, tok := range []string{"opaque-token", jwt(`{"sub":"no-exp"}`), jwt(`{"exp":"soon"}`)} {
		got, err := token.CheckExpiry(token.Static(tok), token.WithClock(late)).Token(context.Background())
		if err != nil || got != tok {
			t.Errorf("Token(%q) = %q, %v; want it sent as is", tok, got, err)
		}
	}
	wantErr := errors.New("boom")
	_, err := token.CheckExpiry(token.SourceFunc(func(context.Context) (string, error) { return "", wantErr })).Token(context.Background())
	if !errors.Is(err, wantErr) {
		t.Errorf("source error = %v; want it passed through", err)
	}
}

func TestExpiredErrorNamesFileAndExpiry(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	exp := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	writeFile(t, path, jwt(fmt.Sprintf(`{"exp":%d}`, exp.Unix()))+"\n")
	src := token.CheckExpiry(token.File(path), token.WithClock(func() time.Time { return exp.Add(5 * time.Minute) }))
	_, err := src.Token(context.Background())
	var ee *token.ExpiredError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v; want *ExpiredError", err)
	}
	msg := err.Error()
	for _, want := range []string{path, "2026-11-30T10:00:00Z", "5m0s ago"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if ee.Source != fmt.Sprintf("file %q", path) {
		t.Errorf("Source = %q", ee.Source)
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	t.Run("trims surrounding white space", func(t *testing.T) {
		p := filepath.Join(dir, "nl")
		writeFile(t, p, "  abc.def.ghi\n\n")
		got, err := token.File(p).Token(context.Background())
		if err != nil || got != "abc.def.ghi" {
			t.Fatalf("Token() = %q, %v", got, err)
		}
	})
	t.Run("empty file names the path", func(t *testing.T) {
		p := filepath.Join(dir, "empty")
		writeFile(t, p, " \n")
		_, err := token.File(p).Token(context.Background())
		if !errors.Is(err, token.ErrEmpty) || !strings.Contains(err.Error(), p) {
			t.Fatalf("err = %v; want ErrEmpty naming %s", err, p)
		}
	})
	t.Run("missing file names the path", func(t *testing.T) {
		p := filepath.Join(dir, "missing")
		_, err := token.File(p).Token(context.Background())
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), p) {
			t.Fatalf("err = %v; want ErrNotExist naming %s", err, p)
		}
	})
	t.Run("unreadable file names the path", func(t *testing.T) {
		// A directory cannot be read as a file, even by root.
		_, err := token.File(dir).Token(context.Background())
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("err = %v; want an error naming %s", err, dir)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := token.File(filepath.Join(dir, "nl")).Token(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v; want context.Canceled", err)
		}
	})
}

// TestFileFollowsKubeletSymlinkSwap reproduces the layout the kubelet uses
// for Secret and projected volumes: token -> ..data/token, ..data -> a
// timestamped directory, updated by renaming a new ..data link over the old.
func TestFileFollowsKubeletSymlinkSwap(t *testing.T) {
	vol, err := tokenvolume.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := token.File(vol.Path())
	for i, want := range []string{"first", "second", "third"} {
		if err := vol.Publish(want); err != nil {
			t.Fatal(err)
		}
		got, err := src.Token(context.Background())
		if err != nil || got != want {
			t.Fatalf("after swap %d: Token() = %q, %v; want %q", i, got, err, want)
		}
	}
}

func TestStatic(t *testing.T) {
	if got, err := token.Static("x").Token(context.Background()); err != nil || got != "x" {
		t.Fatalf("Token() = %q, %v", got, err)
	}
	_, err := token.Static("").Token(context.Background())
	if !errors.Is(err, token.ErrEmpty) {
		t.Fatalf("empty static: err = %v; want ErrEmpty", err)
	}
	if s := fmt.Sprint(token.Static("secret")); strings.Contains(s, "secret") {
		t.Fatalf("String() reveals the token: %q", s)
	}
}

func TestFileConcurrent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	writeFile(t, p, "tok")
	src := token.CheckExpiry(token.File(p))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got, err := src.Token(context.Background()); err != nil || got != "tok" {
					t.Errorf("Token() = %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func ExampleCheckExpiry() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "token")
	// A JWT that expired at 2026-11-30T10:00:00Z.
	_ = os.WriteFile(path, []byte(jwt(`{"exp":1796032800}`)), 0o600)

	src := token.CheckExpiry(token.File(path), token.WithClock(func() time.Time {
		return time.Date(2026, 11, 30, 10, 2, 0, 0, time.UTC)
	}))
	_, err := src.Token(context.Background())
	var expired *token.ExpiredError
	if errors.As(err, &expired) {
		fmt.Println("expired at", expired.Expiry.UTC().Format(time.RFC3339), "in", filepath.Base(strings.Trim(strings.TrimPrefix(expired.Source, "file "), `"`)))
	}
	// Output: expired at 2026-11-30T10:00:00Z in token
}

// TestCheckExpiryFollowsRotation: the checker remembers the last token it
// parsed; a rotated file must be judged on its new content, and a remembered
// token must be judged against the clock of each call.
func TestCheckExpiryFollowsRotation(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	now := time.Unix(1800000000, 0)
	src := token.CheckExpiry(token.File(p), token.WithClock(func() time.Time { return now }))
	fresh := jwt(fmt.Sprintf(`{"exp":%d}`, now.Add(time.Minute).Unix()))
	stale := jwt(fmt.Sprintf(`{"exp":%d}`, now.Add(-time.Minute).Unix()))
	steps := []struct {
		content     string
		advance     time.Duration
		wantExpired bool
	}{
		{stale, 0, true},
		{fresh, 0, false},
		{fresh, 2 * time.Minute, true}, // same content, later clock
		{stale, 0, true},
		{"opaque", 0, false},
	}
	for i, s := range steps {
		writeFile(t, p, s.content)
		now = now.Add(s.advance)
		_, err := src.Token(context.Background())
		if got := errors.Is(err, token.ErrExpired); got != s.wantExpired {
			t.Fatalf("step %d: expired = %v (err %v); want %v", i, got, err, s.wantExpired)
		}
	}
}

// TestNumericDateBeyondRange: a date beyond ±2^62 s is read as ±2^62 s (it
// never expires, or expired long ago), as the API server reads it; a number
// beyond an IEEE double, a quoted number and null are not NumericDates.
func TestNumericDateBeyondRange(t *testing.T) {
	far := time.Unix(1<<62, 0)
	for in, want := range map[string]time.Time{
		"4611686018427387904":   far,
		"9223372036854775808":   far,
		"1e300":                 far,
		"-1e300":                time.Unix(-1<<62, 0),
		"4611686018427387903.5": far,
		"1767225600":            time.Unix(1767225600, 0),
	} {
		var n token.NumericDate
		if err := n.UnmarshalJSON([]byte(in)); err != nil || !n.Equal(want) {
			t.Errorf("%s: %v %v; want %v", in, n.Time, err, want)
		}
	}
	for _, in := range []string{"1e400", `"1767225600"`, "null", "{}"} {
		var n token.NumericDate
		if err := n.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s read as %v", in, n.Time)
		}
	}
}
