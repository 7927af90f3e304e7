package decisionlog

import (
	"encoding/json"
	"testing"
	"time"
)

// TestColumnsAsJSONReadsThem: what the search index reads of an entry
// is what encoding/json reads of it, whatever its strings hold.
func TestColumnsAsJSONReadsThem(t *testing.T) {
	l := &Log{service: "pdp"}
	for _, s := range []string{"", "plain", `a "quoted" word`, `back\slash`, "new\nline", "ünïcødé ✓", `,"answer":{}`, "\u2028", "<&>", "\x01"} {
		d := Decision{Caller: s, System: s + "x", Tenant: s, Reason: s, Allowed: s == "plain", Path: "/v1/check", Status: 200,
			Answer: []byte(`{"record":{"caller":` + mustJSON(t, s) + `}}`), At: time.Date(2026, 12, 7, 12, 0, 0, 123e6, time.UTC)}
		e, err := l.entry(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := columnsOf(e)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		var want columns
		if err := json.Unmarshal(e, &want); err != nil {
			t.Fatal(err)
		}
		got.at = 0
		if got != want {
			t.Errorf("%q: read %+v, encoding/json reads %+v", s, got, want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"at":`, `{"caller":"cut`, `{"caller":{"x":1}}`} {
		if _, err := columnsOf([]byte(bad)); err == nil {
			t.Errorf("%q read as a decision", bad)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
