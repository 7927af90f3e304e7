package bearer_test

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/token"
)

const jwt = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln-_~+/=="

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		values  []string
		kind    bearer.Kind
		token   string
		problem string
	}{
		{"absent", nil, bearer.Absent, "", ""},
		{"token", []string{"Bearer " + jwt}, bearer.Token, jwt, ""},
		{"scheme is case-insensitive", []string{"bearer abc"}, bearer.Token, "abc", ""},
		{"upper-case scheme", []string{"BEARER abc"}, bearer.Token, "abc", ""},
		{"extra spaces before the token", []string{"Bearer   abc"}, bearer.Token, "abc", ""},
		{"duplicated header", []string{"Bearer a", "Bearer b"}, bearer.Malformed, "", "duplicated"},
		{"duplicated identical header", []string{"Bearer a", "Bearer a"}, bearer.Malformed, "", "duplicated"},
		{"basic scheme", []string{"Basic dXNlcjpwYXNz"}, bearer.Malformed, "", "scheme is Basic, not Bearer"},
		{"no scheme", []string{jwt}, bearer.Malformed, "", `not "Bearer <token>"`},
		{"scheme only", []string{"Bearer"}, bearer.Malformed, "", "empty"},
		{"scheme and space", []string{"Bearer "}, bearer.Malformed, "", "empty"},
		{"empty header", []string{""}, bearer.Malformed, "", `not "Bearer <token>"`},
		{"two tokens", []string{"Bearer a b"}, bearer.Malformed, "", "characters"},
		{"comma-joined duplicates", []string{"Bearer a, Bearer b"}, bearer.Malformed, "", "characters"},
		{"trailing space", []string{"Bearer abc "}, bearer.Malformed, "", "characters"},
		{"tab separator", []string{"Bearer\tabc"}, bearer.Malformed, "", `not "Bearer <token>"`},
		{"padding in the middle", []string{"Bearer ab=c"}, bearer.Malformed, "", "characters"},
		{"only padding", []string{"Bearer ==="}, bearer.Malformed, "", "characters"},
		{"control character", []string{"Bearer abc\x00"}, bearer.Malformed, "", "characters"},
		{"non-ASCII", []string{"Bearer ａｂｃ"}, bearer.Malformed, "", "characters"},
		{"oversize", []string{"Bearer " + strings.Repeat("a", token.MaxLength+1)}, bearer.Malformed, "", "longer than 16384"},
		{"at the size limit", []string{"Bearer " + strings.Repeat("a", token.MaxLength)}, bearer.Token, strings.Repeat("a", token.MaxLength), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := bearer.Parse(tt.values)
			if c.Kind != tt.kind || c.Token != tt.token || !strings.Contains(c.Problem, tt.problem) {
				t.Fatalf("Parse(%q) = %v %q %q; want %v %q ...%q...", tt.values, c.Kind, c.Token, c.Problem, tt.kind, tt.token, tt.problem)
			}
			if c.Kind == bearer.Malformed && c.Problem == "" {
				t.Fatal("malformed without a problem")
			}
		})
	}
}

func TestProblemNeverQuotesTheCredential(t *testing.T) {
	for _, v := range []string{"Secret-Scheme-Value-That-Is-Long-Enough-To-Matter xyz", "Bearer s3cr3t!", "s3cr3t"} {
		if c := bearer.Parse([]string{v}); strings.Contains(c.Problem, "s3cr3t") || strings.Contains(c.Problem, "Long-Enough") {
			t.Errorf("problem %q quotes the credential", c.Problem)
		}
	}
}

func TestFromHeaderAndMetadata(t *testing.T) {
	h := http.Header{}
	if c := bearer.FromHeader(h); c.Kind != bearer.Absent {
		t.Fatalf("empty header: %v", c.Kind)
	}
	h.Add("Authorization", "Bearer a")
	if c := bearer.FromHeader(h); c.Kind != bearer.Token || c.Token != "a" {
		t.Fatalf("one header: %+v", c)
	}
	h.Add("authorization", "Bearer b")
	if c := bearer.FromHeader(h); c.Kind != bearer.Malformed {
		t.Fatalf("two headers: %+v", c)
	}
	md := metadata.Pairs("authorization", "Bearer a")
	if c := bearer.FromMetadata(md); c.Kind != bearer.Token || c.Token != "a" {
		t.Fatalf("metadata: %+v", c)
	}
	md.Append("authorization", "Bearer b")
	if c := bearer.FromMetadata(md); c.Kind != bearer.Malformed {
		t.Fatalf("duplicated metadata: %+v", c)
	}
	if c := bearer.FromMetadata(metadata.MD{}); c.Kind != bearer.Absent {
		t.Fatalf("no metadata: %+v", c)
	}
	if c := bearer.FromMetadata(nil); c.Kind != bearer.Absent {
		t.Fatalf("nil metadata: %+v", c)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "Bearer " + jwt, "bearer x", "Basic abc", "Bearer", "Bearer ", "Bearer a b", "Bearer a==", "Bearer =", "x y z", "Bearer \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c := bearer.Parse([]string{v})
		switch c.Kind {
		case bearer.Token:
			if c.Token == "" || len(c.Token) > token.MaxLength || strings.ContainsAny(c.Token, " \t\r\n,\x00") {
				t.Fatalf("accepted token %q from %q", c.Token, v)
			}
			if !strings.HasSuffix(v, c.Token) || !strings.EqualFold(v[:6], "bearer") {
				t.Fatalf("token %q not the tail of a Bearer header %q", c.Token, v)
			}
		case bearer.Malformed:
			if c.Problem == "" || c.Token != "" {
				t.Fatalf("malformed %+v", c)
			}
		default:
			t.Fatalf("one value gave %v", c.Kind)
		}
		if d := bearer.Parse([]string{v, v}); d.Kind != bearer.Malformed {
			t.Fatal("a duplicated header was not malformed")
		}
	})
}

func BenchmarkParse(b *testing.B) {
	v := []string{"Bearer " + strings.Repeat("eyJhbGciOiJFUzI1NiJ9", 50)}
	b.ReportAllocs()
	for b.Loop() {
		if bearer.Parse(v).Kind != bearer.Token {
			b.Fatal("not a token")
		}
	}
}
