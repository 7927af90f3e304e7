package pdp

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// FuzzMembers: on any object ijson accepts, the one-pass splitter finds
// exactly the members encoding/json finds, each value the same JSON; and
// on any array, the same elements.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, ` { "a" : [1, {"b": "]}"}] , "c\"d": "x\\"  ,"e":null,"\u0066":true} `,
		`{"subject":{"type":"user","id":"a","properties":{"x":[1,2,{"y":"}"}]}},"evaluations":[{},{"a":-1.5e3}]}`,
		`[]`, `[1, "a", {"b": [2]}, [3], null]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if ijson.Check(doc) != nil {
			return
		}
		doc = bytes.TrimSpace(doc)
		switch doc[0] {
		case '{':
			var want map[string]json.RawMessage
			if err := json.Unmarshal(doc, &want); err != nil {
				t.Fatalf("ijson accepted what encoding/json refuses: %v", err)
			}
			got, err := members(doc)
			if err != nil {
				t.Fatalf("members(%s): %v", doc, err)
			}
			if len(got) != len(want) {
				t.Fatalf("members(%s): %d members, encoding/json %d", doc, len(got), len(want))
			}
			for k, v := range want {
				if !bytes.Equal(bytes.TrimSpace(got[k]), bytes.TrimSpace(v)) {
					t.Fatalf("members(%s)[%q] = %s, encoding/json %s", doc, k, got[k], v)
				}
			}
		case '[':
			var want []json.RawMessage
			if err := json.Unmarshal(doc, &want); err != nil {
				t.Fatalf("ijson accepted what encoding/json refuses: %v", err)
			}
			got, err := elements(doc)
			if err != nil || len(got) != len(want) {
				t.Fatalf("elements(%s): %d, %v; encoding/json %d", doc, len(got), err, len(want))
			}
			for i := range want {
				if !bytes.Equal(bytes.TrimSpace(got[i]), bytes.TrimSpace(want[i])) {
					t.Fatalf("elements(%s)[%d] = %s, encoding/json %s", doc, i, got[i], want[i])
				}
			}
		}
	})
}
