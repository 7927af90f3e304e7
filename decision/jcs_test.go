package decision_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"unicode/utf16"

	"github.com/callerauth/callerauth/decision"
)

func TestCanonicalizeRFC8785(t *testing.T) {
	tests := []struct{ name, in, want string }{
		// RFC 8785 §3.2.2, the example input and output.
		{"rfc example", `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		// RFC 8785 §3.2.3: sorting by UTF-16 code units.
		{"utf-16 sort", `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			`{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign","😀":"Emoji: Grinning Face","דּ":"Hebrew Letter Dalet With Dagesh"}`},
		{"nested and whitespace", "{ \"b\" : [ 1 , { \"d\":2, \"c\":3 } ], \"a\":\"x\" }", `{"a":"x","b":[1,{"c":3,"d":2}]}`},
		{"html characters are not escaped", `{"a":"<&>"}`, `{"a":"<&>"}`},
		{"integers", `[0, -0, 1, -1, 100, 1e21, 1e20, 123456789012345680000]`, `[0,0,1,-1,100,1e+21,100000000000000000000,123456789012345680000]`},
		{"small numbers", `[0.000001, 0.0000001, 1.5e-7, -2.5]`, `[0.000001,1e-7,1.5e-7,-2.5]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decision.Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("\n got %s\nwant %s", got, tt.want)
			}
		})
	}
	for _, bad := range []string{`{`, `{"a":1} {"b":2}`, ``,
		// Not I-JSON (RFC 8785 §3.1 requires it): refused, not resolved.
		`{"system":"a","system":"b"}`, `{"fields":["private_key"],"fields":["password"]}`,
		`{"s":"\ud800"}`, "{\"s\":\"\xff\"}", `{"s":"\udc00x"}`,
	} {
		if _, err := decision.Canonicalize([]byte(bad)); err == nil {
			t.Errorf("Canonicalize(%q) accepted", bad)
		}
	}
}

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2.5,"x"]`, `{"b":1,"a":{"d":[true,null]}}`, `"\u0000"`, `1e308`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decision.Canonicalize([]byte(s))
		if err != nil {
			return
		}
		again, err := decision.Canonicalize(c)
		if err != nil || string(again) != string(c) {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", s, c, again, err)
		}
		// The same document, read by another reader; members in UTF-16
		// order (RFC 8785 §3.2.3), checked by encoding the names here.
		var in, out any
		if json.Unmarshal([]byte(s), &in) != nil || json.Unmarshal(c, &out) != nil || !reflect.DeepEqual(in, out) {
			t.Fatalf("%q canonicalized to %q: another document", s, c)
		}
		if !membersInUTF16Order(c) {
			t.Fatalf("%q canonicalized to %q: members out of UTF-16 order", s, c)
		}
	})
}

// membersInUTF16Order reports whether every object of doc, at any depth,
// has its members in the order of their names' UTF-16 code units.
func membersInUTF16Order(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			var prev []uint16
			for first := true; dec.More(); first = false {
				name, err := dec.Token()
				if err != nil {
					return false
				}
				units := utf16.Encode([]rune(name.(string)))
				if !first && slices.Compare(prev, units) >= 0 {
					return false
				}
				prev = units
				if !walk() {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		case json.Delim('['):
			for dec.More() {
				if !walk() {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		}
		return true
	}
	return walk()
}
