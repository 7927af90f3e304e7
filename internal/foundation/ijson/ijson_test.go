package ijson

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, doc   string
		ptr, detail string // "" detail: valid; "*" ptr: any pointer
	}{
		{name: "object", doc: `{"a":1,"b":[true,false,null,"x"],"c":{"d":-1.5e3}}`},
		{name: "white space around", doc: " \n\t[1] \r\n"},
		{name: "escaped pair", doc: `"\ud83d\ude00"`},
		{name: "raw astral", doc: `"😀"`},
		{name: "escapes", doc: `"\"\\\/\b\f\n\r\t\u00e9"`},
		{name: "same name in sibling objects", doc: `[{"a":1},{"a":2}]`},
		{name: "empty containers", doc: `{"a":{},"b":[]}`},

		{name: "duplicate top-level member", doc: `{"system":"a","system":"b"}`, ptr: "/system", detail: `member "system" appears more than once`},
		{name: "duplicate after escape", doc: `{"fields":[1],"f\u0069elds":[2]}`, ptr: "/fields", detail: "more than once"},
		{name: "duplicate nested", doc: `{"a":[{"x":1,"x":1}]}`, ptr: "/a/0/x", detail: "more than once"},
		{name: "lone high surrogate", doc: `{"s":"\ud800"}`, ptr: "/s", detail: "unpaired surrogate"},
		{name: "high then not low", doc: `{"s":"\ud800\u0041"}`, ptr: "/s", detail: "unpaired surrogate"},
		{name: "lone low surrogate", doc: `["\udc00"]`, ptr: "/0", detail: "unpaired surrogate"},
		{name: "invalid UTF-8", doc: "{\"s\":\"\xff\"}", ptr: "/s", detail: "invalid UTF-8"},
		{name: "encoded surrogate bytes", doc: "\"\xed\xa0\x80\"", detail: "invalid UTF-8"},
		{name: "invalid UTF-8 in a name", doc: "{\"\xc3\":1}", detail: "invalid UTF-8"},
		{name: "number overflow", doc: `[1e400]`, ptr: "/0", detail: "IEEE 754"},
		{name: "308 digits, no exponent", doc: "[" + strings.Repeat("9", 308) + "]"},
		{name: "309 digits, below the largest double", doc: "[1" + strings.Repeat("0", 308) + ".5]"},
		{name: "310 digits, no exponent", doc: "[-" + strings.Repeat("9", 310) + "]", ptr: "/0", detail: "IEEE 754"},
		{name: "trailing data", doc: `{} {}`, detail: "data after"},
		{name: "leading zero", doc: `[01]`, detail: "expected ','"},
		{name: "bare word", doc: `[nul]`, ptr: "/0", detail: "invalid character"},
		{name: "unterminated", doc: `{"a":"b`, ptr: "/a", detail: "unterminated"},
		{name: "raw control", doc: "\"a\nb\"", detail: "control character"},
		{name: "bad escape", doc: `"\x41"`, detail: "invalid escape"},
		{name: "short unicode escape", doc: `"\u12"`, detail: `\u escape`},
		{name: "empty", doc: ``, detail: "end of the document"},
		{name: "too deep", doc: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), ptr: "*", detail: "nested deeper"},
		{name: "pointer escaping", doc: `{"a/b~":{"c":1,"c":2}}`, ptr: "/a~1b~0/c", detail: "more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.doc))
			if tc.detail == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Check = %v, want an *Error", err)
			}
			if (tc.ptr != "*" && e.Pointer != tc.ptr) || !strings.Contains(e.Problem, tc.detail) {
				t.Fatalf("Check = %v (pointer %q), want pointer %q and %q", err, e.Pointer, tc.ptr, tc.detail)
			}
		})
	}
}

func TestErrorMember(t *testing.T) {
	for ptr, want := range map[string]string{"": "", "/fields": "fields", "/fields/0": "fields", "/a~1b~0/c": "a/b~"} {
		if got := (&Error{Pointer: ptr}).Member(); got != want {
			t.Errorf("Member of %q = %q, want %q", ptr, got, want)
		}
	}
}

// FuzzCheck holds Check to encoding/json: what Check accepts, encoding/json
// accepts; what encoding/json accepts and Check refuses is refused for one
// of the I-JSON rules, never for syntax.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", `[1e400]`, `[1,{"b":[null]}]`, `"\ud83d\ude00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := Check(doc)
		valid := json.Valid(doc)
		if err == nil && !valid {
			t.Fatalf("Check accepted %q, which encoding/json refuses", doc)
		}
		if err != nil && valid {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Check returned %T", err)
			}
			p := e.Problem
			if !strings.Contains(p, "RFC 7493") && !strings.Contains(p, "nested deeper") {
				t.Fatalf("Check refused valid JSON %q for %q, which is no I-JSON rule", doc, p)
			}
		}
	})
}

// FuzzMembers holds Members, String and Strings to encoding/json on every
// document Check accepts: Members yields exactly the object's members,
// names exact and values equal to what encoding/json reads, and String and
// Strings read each value as encoding/json reads a string or a list of
// strings — and refuse it exactly when it is not one (null included).
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"exp":1,"EXP":2}`, `{"aud":["x","y"],"iss":"\u00e9\ud83d\ude00"}`, `{"a":null,"b":[null],"c":["x",1]}`, `[]`, `{"a":{"a":{"a":1}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var want map[string]json.RawMessage
		isObject := json.Unmarshal(doc, &want) == nil && want != nil
		got := map[string][]byte{}
		err := Members(doc, func(name, v []byte) error {
			got[string(name)] = v
			return nil
		})
		if Check(doc) != nil || !isObject {
			if err == nil {
				t.Fatalf("Members accepted %q: Check refuses it or it is no object", doc)
			}
			return
		}
		if err != nil {
			t.Fatalf("Members refused %q, an I-JSON object: %v", doc, err)
		}
		if len(got) != len(want) {
			t.Fatalf("Members yielded %d members of %q, encoding/json reads %d", len(got), doc, len(want))
		}
		// Walk, the read of a document already checked, yields the same
		// members with the same values, and so does it for every nested
		// object.
		walked := map[string][]byte{}
		if err := Walk(doc, func(name, v []byte) error {
			walked[string(name)] = v
			if len(v) > 0 && v[0] == '{' {
				var strict, quick [][2]string
				_ = Members(v, func(n, w []byte) error { strict = append(strict, [2]string{string(n), string(w)}); return nil })
				_ = Walk(v, func(n, w []byte) error { quick = append(quick, [2]string{string(n), string(w)}); return nil })
				if !slices.Equal(strict, quick) {
					t.Fatalf("nested %q: Walk %q, Members %q", v, quick, strict)
				}
			}
			return nil
		}); err != nil || len(walked) != len(got) {
			t.Fatalf("Walk(%q): %d members, %v; Members %d", doc, len(walked), err, len(got))
		}
		for name, v := range got {
			if string(walked[name]) != string(v) {
				t.Fatalf("member %q of %q: Walk %q, Members %q", name, doc, walked[name], v)
			}
		}
		for name, v := range want {
			if string(got[name]) != string(v) {
				t.Fatalf("member %q of %q: Members %q, encoding/json %q", name, doc, got[name], v)
			}
			// Lookup, the unchecked read before a signature verifies,
			// finds the same value in a document Members accepts.
			if lv, ok, err := Lookup(doc, name); err != nil || !ok || string(lv) != string(v) {
				t.Fatalf("Lookup(%q, %q) = %q, %v, %v; Members %q", doc, name, lv, ok, err, v)
			}
			var ws string
			wantStr := v[0] == '"' && json.Unmarshal(v, &ws) == nil
			gs, ok := String(v)
			if ok != wantStr || gs != ws {
				t.Fatalf("String(%q) = %q, %v; encoding/json %q, %v", v, gs, ok, ws, wantStr)
			}
			var wl []string
			wantList := v[0] == '[' && json.Unmarshal(v, &wl) == nil && !strings.Contains(string(v), "null")
			gl, ok := Strings(v)
			if wantList && (!ok || strings.Join(gl, "\x00") != strings.Join(wl, "\x00")) || ok && !wantList && !strings.Contains(string(v), "null") {
				t.Fatalf("Strings(%q) = %q, %v; encoding/json %q, %v", v, gl, ok, wl, wantList)
			}
		}
	})
}

// TestDecode: the strict reader refuses what encoding/json lets through —
// a member twice, an unknown member, invalid UTF-8 — naming the fault, and
// decodes the rest.
func TestDecode(t *testing.T) {
	type doc struct {
		Name  string   `json:"name"`
		Items []string `json:"items"`
	}
	var d doc
	if err := Decode([]byte(`{"name": "a", "items": ["x", "y"]}`), &d); err != nil || d.Name != "a" || len(d.Items) != 2 {
		t.Fatalf("%+v %v", d, err)
	}
	for in, want := range map[string]string{
		`{"name": "a", "name": "b"}`:  `"name"`,
		`{"name": "a", "title": "b"}`: `unknown field "title"`,
		"{\"name\": \"\xff\"}":        "UTF-8",
		`{"name": "a"} {"name": "b"}`: "",
		// null gives no value: refused where encoding/json would leave the
		// field as it was (or a map the caller made nil).
		`{"name": null}`:         `null: leave the member out, or give it a value (at "/name"`,
		`{"items": ["x", null]}`: `(at "/items/1"`,
		`null`:                   `null`,
	} {
		if err := Decode([]byte(in), &doc{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error naming %q", in, err, want)
		}
	}
}

// TestElements: each element in order, as raw text; an error from the
// callback stops the walk and comes back as it is; a document that is not
// one array of valid elements is an *Error at the fault.
func TestElements(t *testing.T) {
	var got []string
	if err := Elements([]byte(` [ {"a": [1]}, "x" ,null ] `), func(e []byte) error { got = append(got, string(e)); return nil }); err != nil || strings.Join(got, "|") != `{"a": [1]}|"x"|null` {
		t.Fatalf("%q %v", got, err)
	}
	stop := errors.New("stop")
	n := 0
	if err := Elements([]byte(`[1, 2, 3]`), func([]byte) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("stop: %v after %d", err, n)
	}
	for in, want := range map[string]string{
		`{"a": 1}`:              "not a JSON array",
		`[1, {"a": 1, "a": 2}]`: "/1/a",
		`[1,]`:                  "/1",
		`[1] 2`:                 "data after",
	} {
		var e *Error
		if err := Elements([]byte(in), func([]byte) error { return nil }); !errors.As(err, &e) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an *Error naming %q", in, err, want)
		}
	}
	if l, ok := Strings([]byte(`[]`)); !ok || l == nil || len(l) != 0 {
		t.Fatalf("Strings([]) = %#v %t", l, ok)
	}
	if _, ok := Strings([]byte(`["a", 1]`)); ok {
		t.Fatal("Strings accepted a number")
	}
}

// FuzzElements: on any document, Elements accepts exactly the I-JSON
// arrays and yields the elements encoding/json reads, each the same text.
func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, `[1, "a", {"b": [2]}, [3], null]`, ` [ "]", {"x": "]}"} ] `, `[{"a":1,"a":2}]`, `{"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var want []json.RawMessage
		isArray := json.Unmarshal(doc, &want) == nil && want != nil
		var got [][]byte
		err := Elements(doc, func(e []byte) error {
			got = append(got, e)
			return nil
		})
		if Check(doc) != nil || !isArray {
			if err == nil {
				t.Fatalf("Elements accepted %q: Check refuses it or it is no array", doc)
			}
			return
		}
		if err != nil || len(got) != len(want) {
			t.Fatalf("Elements(%q): %d elements, %v; encoding/json %d", doc, len(got), err, len(want))
		}
		for i := range want {
			if string(got[i]) != string(want[i]) {
				t.Fatalf("element %d of %q: Elements %q, encoding/json %q", i, doc, got[i], want[i])
			}
		}
	})
}

// TestText: strings read through a Text are the same as String's, share
// the document's one copy when plain, and fall back to a copy each for an
// escaped string, a value from another document and the zero Text.
func TestText(t *testing.T) {
	doc := []byte(`{"a":"plain","b":"esc\u0041ped","c":["x","y"],"d":7}`)
	text := NewText(doc)
	got := map[string]string{}
	err := Members(doc, func(name, v []byte) error {
		switch string(name) {
		case "a", "b":
			s, ok := text.String(v)
			want, wantOK := String(v)
			if s != want || ok != wantOK {
				t.Errorf("%s: %q %v; String says %q %v", name, s, ok, want, wantOK)
			}
			got[string(name)] = s
		case "c":
			l, ok := text.Strings(v)
			if !ok || len(l) != 2 || l[0] != "x" || l[1] != "y" {
				t.Errorf("c: %q %v", l, ok)
			}
		case "d":
			if _, ok := text.String(v); ok {
				t.Error("a number read as a string")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "plain" || got["b"] != "escAped" {
		t.Fatalf("%q", got)
	}
	// "plain" is a substring of the copy: its bytes lie inside it.
	in := func(s string) bool {
		base := unsafe.StringData(text.s)
		p := unsafe.StringData(s)
		return uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(base)) && uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(base))+uintptr(len(text.s))
	}
	if !in(got["a"]) {
		t.Error("a plain string was copied, not taken from the text")
	}
	if in(got["b"]) {
		t.Error("an escaped string points into the text")
	}
	// A value from another document, and the zero Text: a copy each.
	other := []byte(`"plain"`)
	if s, ok := text.String(other); !ok || s != "plain" || in(s) {
		t.Errorf("another document's value: %q %v", s, ok)
	}
	if s, ok := (Text{}).String(doc[5:12]); !ok || s != "plain" {
		t.Errorf("zero Text: %q %v", s, ok)
	}
}

// kubePayload is the payload of a bound service-account token, the
// document the offline verifier walks once per token.
var kubePayload = []byte(`{"aud":["platform-connector"],"exp":1796563245,"iat":1796559645,"iss":"https://idp.example","jti":"5f1c2a4e-0b6e-4f0c-9d57-3c1c5e0a9b11","kubernetes.io":{"namespace":"nvsentinel","node":{"name":"node-a","uid":"0b0c5b8e-3e0a-4bb0-9d8c-6f4b2a1d0e9f"},"pod":{"name":"gpu-monitor-x2k4q","uid":"1d2c3b4a-5e6f-4a8b-9c0d-1e2f3a4b5c6d"},"serviceaccount":{"name":"gpu-monitor","uid":"9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"}},"nbf":1796559645,"sub":"system:serviceaccount:nvsentinel:gpu-monitor"}`)

// BenchmarkMembers is the strict walk of a token's claims.
func BenchmarkMembers(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := Members(kubePayload, func(_, _ []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNonCharacters: I-JSON strings must not hold Unicode's noncharacters
// (RFC 7493 §2.1: "MUST NOT include code points that identify Surrogates
// or Noncharacters"), raw or escaped, in values and member names; the
// code points beside them are fine.
func TestNonCharacters(t *testing.T) {
	for _, doc := range []string{
		"{\"a\":\"\uFFFF\"}", "{\"a\":\"\uFDD0\"}", "{\"a\":\"\U0010FFFF\"}", "{\"a\":\"\U0001FFFE\"}", "{\"\uFDEF\":1}",
		`{"a":"\uffff"}`, `{"a":"\uFDD0"}`, `{"a":"\udbff\udfff"}`, `{"a":"\ud83f\udffe"}`,
	} {
		if err := Check([]byte(doc)); err == nil || !strings.Contains(err.Error(), "noncharacter") {
			t.Errorf("%q: %v; want a noncharacter refused", doc, err)
		}
	}
	for _, doc := range []string{
		"{\"a\":\"\uFFFD\uFDCF\uFDF0\U0010FFFD\"}", `{"a":"\ufffd\ufdcf\ufdf0\udbff\udffd"}`,
	} {
		if err := Check([]byte(doc)); err != nil {
			t.Errorf("%q: %v; want accepted", doc, err)
		}
	}
}
