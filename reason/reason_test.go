package reason_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/reason"
)

func ExampleNew() {
	// Declared once, at package level, by the package that refuses with it.
	var jobNotFound = reason.New("job_not_found", reason.NotFound, "no such job in your tenant")

	fmt.Println(jobNotFound, jobNotFound.Code(), jobNotFound.Sentence())
	// Output: job_not_found NotFound no such job in your tenant
}

// TestNewRefusesWhatIsNotAReason: a reason that is not a stable word, has
// no code or no sentence panics at declaration, so it never reaches a
// metric label or a caller.
func TestNewRefusesWhatIsNotAReason(t *testing.T) {
	if r := reason.New(strings.Repeat("a", reason.MaxWordBytes), reason.Internal, "x"); r.String() != strings.Repeat("a", 64) || r.IsZero() {
		t.Fatalf("a 64-byte word: %v", r)
	}
	for name, def := range map[string]func(){
		"upper case":           func() { reason.New("Thing_missing", reason.NotFound, "x") },
		"a space":              func() { reason.New("thing missing", reason.NotFound, "x") },
		"a digit first":        func() { reason.New("1thing", reason.NotFound, "x") },
		"empty":                func() { reason.New("", reason.NotFound, "x") },
		"a hyphen":             func() { reason.New("thing-missing", reason.NotFound, "x") },
		"no code":              func() { reason.New("no_code", 0, "x") },
		"an unknown code":      func() { reason.New("bad_code", reason.Internal+1, "x") },
		"no sentence":          func() { reason.New("no_sentence", reason.NotFound, "") },
		"longer than 64 bytes": func() { reason.New(strings.Repeat("a", 65), reason.NotFound, "x") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			def()
		}()
	}
}

// TestUnion: reasons in order, each word once; one word with two meanings
// panics, since it would be answered two ways.
func TestUnion(t *testing.T) {
	a := reason.New("a", reason.NotFound, "a")
	b := reason.New("b", reason.InvalidArgument, "b")
	if got := fmt.Sprint(reason.Words(reason.Union([]reason.Reason{a}, b, a, b))); got != "[a b]" {
		t.Fatalf("union %s", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a word with two meanings: no panic")
		}
	}()
	reason.Union([]reason.Reason{a}, reason.New("a", reason.Unavailable, "a"))
}

func TestZero(t *testing.T) {
	var z reason.Reason
	if !z.IsZero() || z.String() != "" || z.Code() != 0 || z.Code().String() != "OK" {
		t.Fatalf("zero reason %v %v", z, z.Code())
	}
}
