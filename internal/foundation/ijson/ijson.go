// Package ijson is the one reader of every file and body callerauth reads.
// It checks that a JSON text is I-JSON (RFC 7493), the profile that every
// wire format in callerauth follows — the decision records and their
// canonical form (RFC 8785 requires I-JSON), the PDP's requests, every
// configuration file — and reads it: [Decode] for a format that is ours
// (no unknown member, no null), [Members] and [Elements] to walk a
// document member by member, [FromYAML] for a YAML file (no key twice).
//
// encoding/json is lenient where I-JSON is strict: it keeps the last of two
// members with the same name, and it replaces invalid UTF-8 and unpaired
// surrogate escapes with U+FFFD. Both let two parsers read one document
// differently, which is how a signed record comes to mean one thing to its
// signer and another to its consumer. [Check] refuses them before
// encoding/json ever sees the text.
package ijson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxDepth is how deeply arrays and objects may nest.
const MaxDepth = 256

// Error is a document that is not I-JSON. Pointer is the RFC 6901 JSON
// Pointer of the value at fault ("" for the whole document, "/system" for a
// top-level member, "/fields/0" for an array element).
type Error struct {
	Pointer string
	Offset  int // byte offset of the fault in the document
	Problem string
}

func (e *Error) Error() string {
	where := "the document"
	if e.Pointer != "" {
		where = strconv.Quote(e.Pointer)
	}
	return fmt.Sprintf("ijson: %s (at %s, byte %d)", e.Problem, where, e.Offset)
}

// Member is the top-level member the fault is in, "" when it is not in one.
func (e *Error) Member() string {
	if e.Pointer == "" {
		return ""
	}
	first, _, _ := strings.Cut(e.Pointer[1:], "/")
	return strings.ReplaceAll(strings.ReplaceAll(first, "~1", "/"), "~0", "~")
}

// Check returns nil when doc is one I-JSON value (RFC 8259 text, RFC 7493
// §2: UTF-8 only, no unpaired surrogates, unique member names), surrounded
// by white space at most, and an [*Error] naming the first fault otherwise.
func Check(doc []byte) error { return checkWith(doc, false) }

func checkWith(doc []byte, noNull bool) error {
	if check(doc, false, noNull) == nil {
		return nil
	}
	return check(doc, true, noNull)
}

// check scans doc; with track set it keeps the path to the value being
// scanned, for the JSON Pointer of an error. The scan is deterministic, so
// a document is scanned without it first and again with it only when it
// fails: a valid document costs no path. With noNull set, a null anywhere
// is a fault.
func check(doc []byte, track, noNull bool) error {
	s := scanner{b: doc, track: track, noNull: noNull}
	s.space()
	if err := s.value(); err != nil {
		return err
	}
	return s.end()
}

// Decode is the one strict reader of a document whose format is ours (a
// configuration file, a manifest, a proof): doc must be I-JSON ([Check]),
// every member must be a field of v — an unknown member is an error
// naming it, not a silently ignored typo — and no value may be null: where
// a value is required null does not give one, and where it is not the
// member is left out (encoding/json would leave the field as it was, or
// set a map the caller made to nil). Formats that must ignore unknown
// members (the AuthZEN requests) are read with [Members] instead.
func Decode(doc []byte, v any) error {
	if err := checkWith(doc, true); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// Read is the strict reader of a document whose format is another's and
// tells its readers to ignore the members they do not know — a JWK Set
// (RFC 7517 §4, §5), an OpenID Provider's discovery document — so it
// differs from [Decode] only there: doc must be I-JSON ([Check]: a member
// twice, invalid UTF-8 or an unpaired surrogate is refused, never
// resolved, which RFC 7517 §4 and §5 allow a parser), then v is filled as
// encoding/json does, unknown members ignored.
func Read(doc []byte, v any) error {
	if err := Check(doc); err != nil {
		return err
	}
	return json.Unmarshal(doc, v)
}

// FromYAML reads a YAML (or JSON) document as strict JSON: a key written
// twice in one mapping is refused (YAML would keep the last), and the JSON
// it becomes must be I-JSON. Decode the result with [Decode] for a format
// that is ours.
func FromYAML(doc []byte) ([]byte, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if err := Check(j); err != nil {
		return nil, err
	}
	return j, nil
}
