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
	"unicode/utf8"
	"unsafe"

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

// Members checks doc as [Check] does, requires it to be an object, and
// calls fn with each top-level member in document order: its name,
// decoded, and its value as raw JSON text (both valid only during the
// call unless doc outlives them: they may be slices of doc). Names are compared exactly, as
// RFC 8259 §8.3 says (encoding/json would also match "EXP" to a field
// tagged "exp"), so a reader that switches on the name sees each member
// under its own name only. An error from fn stops the walk and is
// returned as it is; every member fn was given has been checked.
func Members(doc []byte, fn func(name, value []byte) error) error {
	s := scanner{b: doc}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return s.fail("not a JSON object")
	}
	if err := s.enter(); err != nil {
		return check(doc, true, false)
	}
	var o objectState
	for {
		name, value, ok, err := s.member(&o)
		if err != nil {
			return check(doc, true, false)
		}
		if !ok {
			break
		}
		if err := fn(name, value); err != nil {
			return err
		}
	}
	if s.end() != nil {
		return check(doc, true, false)
	}
	return nil
}

// Walk calls fn with each top-level member of the object doc, as
// [Members] does, for a doc that is already known to be I-JSON: a value
// inside a document [Members] or [Check] accepted (a token's nested
// claim, read after its payload was). Nothing is checked again — names
// are not compared, numbers not parsed — and each value is skipped by
// matching its brackets. On a doc that was never checked it may yield
// what a strict reader would refuse: never use it on one.
func Walk(doc []byte, fn func(name, value []byte) error) error {
	s := scanner{b: doc, loose: true, checked: true}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return s.fail("not a JSON object")
	}
	var o objectState
	for {
		name, value, ok, err := s.member(&o)
		if err != nil || !ok {
			return err
		}
		if err := fn(name, value); err != nil {
			return err
		}
	}
}

// skip returns the end of the value that starts at i in a checked
// document: after its closing quote or bracket, or before the ',', '}'
// or ']' (and any white space) that ends a number or a literal.
func skip(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			i++
		case '{', '[':
			depth++
			i++
			continue
		case '}', ']', ',':
			if depth == 0 {
				for i > 0 && (b[i-1] == ' ' || b[i-1] == '\t' || b[i-1] == '\n' || b[i-1] == '\r') {
					i--
				}
				return i
			}
			if c != ',' {
				depth--
			}
			i++
		default:
			i++
			continue
		}
		if depth == 0 {
			return min(i, len(b))
		}
	}
	return min(i, len(b))
}

// Elements checks doc as [Check] does, requires it to be an array, and
// calls fn with each element as raw JSON text, in order (valid only during
// the call unless doc outlives it). An error from fn stops the walk and is
// returned as it is; every element fn was given has been checked.
func Elements(doc []byte, fn func(value []byte) error) error {
	s := scanner{b: doc}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return s.fail("not a JSON array")
	}
	var stopped error
	s.element = func(e []byte) error {
		stopped = fn(e)
		return stopped
	}
	err := s.array()
	if stopped != nil {
		return stopped
	}
	if err != nil || s.end() != nil {
		return check(doc, true, false)
	}
	return nil
}

// Lookup returns the raw value of the first top-level member of the object
// doc named name (compared exactly), scanning only as far as that member,
// and ok false when there is none. It checks the syntax of what it scans
// but not that names are unique, and keeps nothing per member: it is the
// cheap read of one member before a document is trusted (the issuer of a
// token, to pick the key that must verify it); the full read, with
// [Members], comes after.
func Lookup(doc []byte, name string) (value []byte, ok bool, err error) {
	s := scanner{b: doc, loose: true}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return nil, false, s.fail("not a JSON object")
	}
	if err := s.enter(); err != nil {
		return nil, false, err
	}
	var o objectState
	for {
		n, v, more, err := s.member(&o)
		if err != nil || !more {
			return nil, false, err
		}
		if string(n) == name {
			return v, true, nil
		}
	}
}

// String returns the value of a JSON string given as raw text (a member's
// value as [Members] yields it), and false when the text is not one
// I-JSON string.
func String(v []byte) (string, bool) {
	if n := len(v); n >= 2 && v[0] == '"' && v[n-1] == '"' && plain(v[1:n-1]) {
		return string(v[1 : n-1]), true
	}
	s := &scanner{b: v}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	str, err := s.str(true)
	if err != nil || s.end() != nil {
		return "", false
	}
	return str, true
}

// Plain returns the contents of a JSON string given as raw text when they
// need no decoding (printable ASCII, no escape): a slice of v, no copy —
// to look a string up in a map without allocating one.
func Plain(v []byte) ([]byte, bool) {
	if n := len(v); n >= 2 && v[0] == '"' && v[n-1] == '"' && plain(v[1:n-1]) {
		return v[1 : n-1], true
	}
	return nil, false
}

// Strings returns the values of a JSON array of strings given as raw text,
// and false when the text is anything else (an element that is not a
// string included).
func Strings(v []byte) ([]string, bool) { return Text{}.Strings(v) }

// Text is a document and one string copy of it: the strings read from
// its values with [Text.String] are substrings of that copy — one
// allocation for every string of a document, instead of one each. A
// string kept keeps the whole copy alive: use it for small documents (a
// token's claims), and the zero Text (no copy: each string allocated) for
// the rest.
type Text struct {
	b []byte
	s string
}

// NewText copies doc once into a Text.
func NewText(doc []byte) Text { return Text{b: doc, s: string(doc)} }

// OwnText is a Text over doc itself, without a copy, for a doc that no
// one writes to again (a buffer just decoded for this one read): its
// strings share doc's bytes, so a kept string keeps doc alive.
func OwnText(doc []byte) Text {
	if len(doc) == 0 {
		return Text{}
	}
	return Text{b: doc, s: unsafe.String(&doc[0], len(doc))} //nolint:gosec // audited: the caller gives up doc (see above); nothing writes to it again.
}

// String is [String], as a substring of t's copy when v is a plain string
// value inside t's document.
func (t Text) String(v []byte) (string, bool) {
	if off, ok := t.offset(v); ok && len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && plain(v[1:len(v)-1]) {
		return t.s[off+1 : off+len(v)-1], true
	}
	return String(v)
}

// Strings is [Strings], each element as [Text.String] reads it.
func (t Text) Strings(v []byte) ([]string, bool) {
	s := scanner{b: v}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return nil, false
	}
	s.i++
	s.space()
	out := make([]string, 0, 1) // an audience list of one, most often
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return out, s.end() == nil
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return nil, false
		}
		start := s.i
		if _, err := s.str(false); err != nil {
			return nil, false
		}
		str, ok := t.String(s.b[start:s.i])
		if !ok {
			return nil, false
		}
		out = append(out, str)
		more, ok := s.afterElement()
		if !ok {
			return nil, false
		}
		if !more {
			return out, s.end() == nil
		}
	}
}

// offset is where v starts in t's document, when v is a part of it: a
// value the scanner sliced from the document keeps the document's
// capacity, so the offset is the difference of the capacities — checked
// by comparing the addresses of that byte.
func (t Text) offset(v []byte) (int, bool) {
	if t.s == "" || len(v) == 0 {
		return 0, false
	}
	off := cap(t.b) - cap(v)
	if off < 0 || off+len(v) > len(t.b) || &t.b[off] != &v[0] {
		return 0, false
	}
	return off, true
}

// plain reports whether b is printable ASCII without '"' or '\\': the
// contents of a JSON string that needs no decoding.
func plain(b []byte) bool {
	for _, c := range b {
		if !plainByte[c] {
			return false
		}
	}
	return true
}

// plainByte marks the bytes a string holds as they are: printable ASCII
// but '"' and '\\' (one table lookup per byte of every string scanned).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// segment is one step of the path to the value being scanned: a member
// name, or an array index when index >= 0.
type segment struct {
	raw   []byte // the name, decoded
	index int
}

type scanner struct {
	b     []byte
	i     int
	depth int
	track bool      // keep path
	path  []segment // when track is set
	// element, when set, is called with each element of the outermost
	// array.
	element func(value []byte) error
	// loose skips the duplicate-name check (Lookup): nothing is kept per
	// member, so a scan costs no allocation however many members there are.
	loose bool
	// noNull makes a null value a fault (Decode).
	noNull bool
	// checked skips values instead of scanning them (Walk): the document
	// is known to be I-JSON.
	checked bool
}

func (s *scanner) end() error {
	s.space()
	if s.i < len(s.b) {
		return s.fail("data after the JSON value")
	}
	return nil
}

// pointer is the RFC 6901 JSON Pointer of the value being scanned; it is
// built only for an error.
func (s *scanner) pointer() string {
	var b strings.Builder
	for _, seg := range s.path {
		b.WriteByte('/')
		if seg.index >= 0 {
			b.WriteString(strconv.Itoa(seg.index))
		} else {
			b.WriteString(escapePointer(string(seg.raw)))
		}
	}
	return b.String()
}

func (s *scanner) fail(problem string) *Error {
	return &Error{Pointer: s.pointer(), Offset: s.i, Problem: problem}
}

func (s *scanner) space() {
	b, i := s.b, s.i // locals, kept in registers
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	s.i = i
}

// nonCharacter reports Unicode's noncharacters — U+FDD0 to U+FDEF and the
// last two code points of every plane — which I-JSON strings must not hold
// (RFC 7493 §2.1).
func nonCharacter(r rune) bool {
	return (r >= 0xFDD0 && r <= 0xFDEF) || (r&0xFFFE == 0xFFFE && r <= utf8.MaxRune)
}

// plainRun returns the end of the run of plain bytes from i.
func plainRun(b []byte, i int) int {
	for i < len(b) && plainByte[b[i]] {
		i++
	}
	return i
}

func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return s.fail("unexpected end of the document")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		_, err := s.str(false)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(s.b[s.i:min(len(s.b), s.i+len(lit))]), lit) {
				if lit == "null" && s.noNull {
					return s.fail("null: leave the member out, or give it a value")
				}
				s.i += len(lit)
				return nil
			}
		}
		return s.fail(fmt.Sprintf("invalid character %q looking for a value", c))
	}
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > MaxDepth {
		return s.fail(fmt.Sprintf("nested deeper than %d", MaxDepth))
	}
	return nil
}

// smallObject is how many members an object may have before the names seen
// are kept in a map rather than compared one by one.
const smallObject = 16

func (s *scanner) object() error {
	if err := s.enter(); err != nil {
		return err
	}
	var o objectState
	for {
		_, _, ok, err := s.member(&o)
		if err != nil || !ok {
			return err
		}
	}
}

// objectState is what scanning one object keeps between its members: the
// names seen, compared one by one while there are few, then in a map.
type objectState struct {
	started bool
	few     [smallObject][]byte
	n       int
	many    map[string]bool
}

// member scans the next member of the object s is in (after its '{' on the
// first call) and returns its name and raw value; ok is false, with the
// closing '}' consumed, when there are no more.
func (s *scanner) member(o *objectState) (name, value []byte, ok bool, err error) {
	if !o.started {
		o.started = true
		s.i++ // {
		s.space()
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			s.depth--
			return nil, nil, false, nil
		}
	} else {
		s.space()
		if s.i >= len(s.b) {
			return nil, nil, false, s.fail("unexpected end of the document in an object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			s.depth--
			return nil, nil, false, nil
		default:
			return nil, nil, false, s.fail("expected ',' or '}' after an object member")
		}
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, nil, false, s.fail("expected a member name (a string)")
	}
	at := s.i
	if name, err = s.name(); err != nil {
		return nil, nil, false, err
	}
	if s.track {
		s.path = append(s.path, segment{raw: name, index: -1})
	}
	if !s.loose && o.seen(name) {
		return nil, nil, false, &Error{Pointer: s.pointer(), Offset: at, Problem: fmt.Sprintf("member %q appears more than once (RFC 7493 §2.3: names must be unique)", name)}
	}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, nil, false, s.fail("expected ':' after a member name")
	}
	s.i++
	s.space()
	start := s.i
	if s.checked {
		s.i = skip(s.b, s.i)
	} else if err := s.value(); err != nil {
		return nil, nil, false, err
	}
	if s.track {
		s.path = s.path[:len(s.path)-1]
	}
	return name, s.b[start:s.i], true, nil
}

// seen records name and reports whether it was seen before.
func (o *objectState) seen(name []byte) bool {
	if o.many != nil {
		seen := o.many[string(name)]
		o.many[string(name)] = true
		return seen
	}
	seen := false
	for _, n := range o.few[:o.n] {
		seen = seen || bytes.Equal(n, name)
	}
	o.few[o.n] = name
	if o.n++; o.n == smallObject {
		o.many = make(map[string]bool, 2*smallObject)
		for _, n := range o.few {
			o.many[string(n)] = true
		}
	}
	return seen
}

func (s *scanner) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	outermost := s.depth == 1
	s.i++ // [
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for n := 0; ; n++ {
		if s.track {
			s.path = append(s.path, segment{index: n})
		}
		start := s.i
		if err := s.value(); err != nil {
			return err
		}
		if outermost && s.element != nil {
			if err := s.element(s.b[start:s.i]); err != nil {
				return err
			}
		}
		if s.track {
			s.path = s.path[:len(s.path)-1]
		}
		more, ok := s.afterElement()
		switch {
		case !ok && s.i >= len(s.b):
			return s.fail("unexpected end of the document in an array")
		case !ok:
			return s.fail("expected ',' or ']' after an array element")
		case !more:
			s.depth--
			return nil
		}
	}
}

// afterElement reads what follows an array element: a ',' and the white
// space after it (more), or the closing ']' (the end); ok is false when it
// is neither.
func (s *scanner) afterElement() (more, ok bool) {
	s.space()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.space()
		return true, true
	case ']':
		s.i++
		return false, true
	}
	return false, false
}

// name scans a member name and returns it decoded: a slice of the
// document when it has no escapes (the common case, no copy), else a copy.
func (s *scanner) name() ([]byte, error) {
	at := s.i
	s.i = plainRun(s.b, s.i+1) // after the "
	if s.i < len(s.b) && s.b[s.i] == '"' {
		s.i++
		return s.b[at+1 : s.i-1], nil
	}
	s.i = at
	str, err := s.str(true)
	return []byte(str), err
}

// str scans a string and, when decode is set, returns its value. Raw bytes
// must be UTF-8; a \u escape of a high surrogate must be followed by one
// of a low surrogate, and a low surrogate may not stand alone. A string
// without escapes is returned as one copy of its bytes.
func (s *scanner) str(decode bool) (string, error) {
	start := s.i + 1 // after the "
	s.i = plainRun(s.b, start)
	if s.i < len(s.b) && s.b[s.i] == '"' {
		s.i++
		if !decode {
			return "", nil
		}
		return string(s.b[start : s.i-1]), nil
	}
	var out strings.Builder
	out.Write(s.b[start:s.i])
	for {
		if s.i >= len(s.b) {
			return "", s.fail("unterminated string")
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return out.String(), nil
		case c == '\\':
			if err := s.escape(&out); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", s.fail(fmt.Sprintf("control character %#02x in a string must be escaped", c))
		case c < utf8.RuneSelf:
			out.WriteByte(c)
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size <= 1 {
				return "", s.fail("invalid UTF-8 in a string (RFC 7493 §2.1)")
			}
			if nonCharacter(r) {
				return "", s.fail(fmt.Sprintf("noncharacter U+%04X in a string (RFC 7493 §2.1)", r))
			}
			out.WriteRune(r)
			s.i += size
		}
	}
}

func (s *scanner) escape(out *strings.Builder) error {
	if s.i+1 >= len(s.b) {
		return s.fail("unterminated escape")
	}
	switch e := s.b[s.i+1]; e {
	case '"', '\\', '/':
		out.WriteByte(e)
	case 'b':
		out.WriteByte('\b')
	case 'f':
		out.WriteByte('\f')
	case 'n':
		out.WriteByte('\n')
	case 'r':
		out.WriteByte('\r')
	case 't':
		out.WriteByte('\t')
	case 'u':
		r, ok := s.hex4(s.i + 2)
		if !ok {
			return s.fail(`invalid \u escape: want four hex digits`)
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return s.fail(fmt.Sprintf(`unpaired surrogate \u%04x (RFC 7493 §2.1)`, r))
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := rune(0), false
			if s.i+7 < len(s.b) && s.b[s.i+6] == '\\' && s.b[s.i+7] == 'u' {
				lo, ok = s.hex4(s.i + 8)
			}
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return s.fail(fmt.Sprintf(`unpaired surrogate \u%04x (RFC 7493 §2.1)`, r))
			}
			p := 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			if nonCharacter(p) {
				return s.fail(fmt.Sprintf(`noncharacter U+%04X (\u%04x\u%04x) in a string (RFC 7493 §2.1)`, p, r, lo))
			}
			out.WriteRune(p)
			s.i += 12
			return nil
		case nonCharacter(r):
			return s.fail(fmt.Sprintf(`noncharacter U+%04X (\u%04x) in a string (RFC 7493 §2.1)`, r, r))
		default:
			out.WriteRune(r)
		}
		s.i += 6
		return nil
	default:
		return s.fail(fmt.Sprintf(`invalid escape \%c`, e))
	}
	s.i += 2
	return nil
}

func (s *scanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[at : at+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// maxWholeDigits is how many digits before the point a number without an
// exponent may have and still be below 10^308, so within a double's range
// (about 1.8e308): such a number needs no parse to be known finite.
const maxWholeDigits = 308

// number scans an RFC 8259 number; one that no IEEE 754 double can hold
// (it overflows to infinity) is refused, as RFC 7493 §2.2 advises.
func (s *scanner) number() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	whole := 1
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if whole = digits(); whole == 0 {
		return s.fail("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.fail("invalid number: no digits after '.'")
		}
	}
	if s.i >= len(s.b) || s.b[s.i] != 'e' && s.b[s.i] != 'E' {
		if whole <= maxWholeDigits {
			return nil // below 10^308 without an exponent: a finite double
		}
	} else {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.fail("invalid number: no digits in the exponent")
		}
	}
	if _, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err != nil {
		return &Error{Pointer: s.pointer(), Offset: start, Problem: "number out of the range of an IEEE 754 double (RFC 7493 §2.2)"}
	}
	return nil
}

func escapePointer(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}
