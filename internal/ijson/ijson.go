// Package ijson checks that a JSON text is I-JSON (RFC 7493), the profile
// that every wire format in callerauth follows: the decision records and
// their canonical form (RFC 8785 requires I-JSON), the PDP's check request,
// and the platform-connector's config.json.
//
// encoding/json is lenient where I-JSON is strict: it keeps the last of two
// members with the same name, and it replaces invalid UTF-8 and unpaired
// surrogate escapes with U+FFFD. Both let two parsers read one document
// differently, which is how a signed record comes to mean one thing to its
// signer and another to its consumer. [Check] refuses them before
// encoding/json ever sees the text.
package ijson

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
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
func Check(doc []byte) error {
	s := &scanner{b: doc}
	s.space()
	if err := s.value(""); err != nil {
		return err
	}
	s.space()
	if s.i < len(s.b) {
		return s.fail("", "data after the JSON value")
	}
	return nil
}

type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) fail(ptr, problem string) *Error {
	return &Error{Pointer: ptr, Offset: s.i, Problem: problem}
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(ptr string) error {
	if s.i >= len(s.b) {
		return s.fail(ptr, "unexpected end of the document")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(ptr)
	case c == '[':
		return s.array(ptr)
	case c == '"':
		_, err := s.str(ptr)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(ptr)
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(s.b[s.i:min(len(s.b), s.i+len(lit))]), lit) {
				s.i += len(lit)
				return nil
			}
		}
		return s.fail(ptr, fmt.Sprintf("invalid character %q looking for a value", c))
	}
}

func (s *scanner) enter(ptr string) error {
	s.depth++
	if s.depth > MaxDepth {
		return s.fail(ptr, fmt.Sprintf("nested deeper than %d", MaxDepth))
	}
	return nil
}

func (s *scanner) object(ptr string) error {
	if err := s.enter(ptr); err != nil {
		return err
	}
	s.i++ // {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	seen := map[string]bool{}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.fail(ptr, "expected a member name (a string)")
		}
		at := s.i
		name, err := s.str(ptr)
		if err != nil {
			return err
		}
		child := ptr + "/" + escapePointer(name)
		if seen[name] {
			return &Error{Pointer: child, Offset: at, Problem: fmt.Sprintf("member %q appears more than once (RFC 7493 §2.3: names must be unique)", name)}
		}
		seen[name] = true
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.fail(child, "expected ':' after a member name")
		}
		s.i++
		s.space()
		if err := s.value(child); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) {
			return s.fail(ptr, "unexpected end of the document in an object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail(ptr, "expected ',' or '}' after an object member")
		}
	}
}

func (s *scanner) array(ptr string) error {
	if err := s.enter(ptr); err != nil {
		return err
	}
	s.i++ // [
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for n := 0; ; n++ {
		if err := s.value(ptr + "/" + strconv.Itoa(n)); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) {
			return s.fail(ptr, "unexpected end of the document in an array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail(ptr, "expected ',' or ']' after an array element")
		}
	}
}

// str scans a string and returns its value. Raw bytes must be UTF-8; a
// \u escape of a high surrogate must be followed by one of a low
// surrogate, and a low surrogate may not stand alone.
func (s *scanner) str(ptr string) (string, error) {
	s.i++ // "
	var out strings.Builder
	for {
		if s.i >= len(s.b) {
			return "", s.fail(ptr, "unterminated string")
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return out.String(), nil
		case c == '\\':
			if err := s.escape(ptr, &out); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", s.fail(ptr, fmt.Sprintf("control character %#02x in a string must be escaped", c))
		case c < utf8.RuneSelf:
			out.WriteByte(c)
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size <= 1 {
				return "", s.fail(ptr, "invalid UTF-8 in a string (RFC 7493 §2.1)")
			}
			out.WriteRune(r)
			s.i += size
		}
	}
}

func (s *scanner) escape(ptr string, out *strings.Builder) error {
	if s.i+1 >= len(s.b) {
		return s.fail(ptr, "unterminated escape")
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
			return s.fail(ptr, `invalid \u escape: want four hex digits`)
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return s.fail(ptr, fmt.Sprintf(`unpaired surrogate \u%04x (RFC 7493 §2.1)`, r))
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := rune(0), false
			if s.i+7 < len(s.b) && s.b[s.i+6] == '\\' && s.b[s.i+7] == 'u' {
				lo, ok = s.hex4(s.i + 8)
			}
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return s.fail(ptr, fmt.Sprintf(`unpaired surrogate \u%04x (RFC 7493 §2.1)`, r))
			}
			out.WriteRune(0x10000 + (r-0xD800)<<10 + (lo - 0xDC00))
			s.i += 12
			return nil
		default:
			out.WriteRune(r)
		}
		s.i += 6
		return nil
	default:
		return s.fail(ptr, fmt.Sprintf(`invalid escape \%c`, e))
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

// number scans an RFC 8259 number; one that no IEEE 754 double can hold
// (it overflows to infinity) is refused, as RFC 7493 §2.2 advises.
func (s *scanner) number(ptr string) error {
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
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.fail(ptr, "invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.fail(ptr, "invalid number: no digits after '.'")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.fail(ptr, "invalid number: no digits in the exponent")
		}
	}
	if _, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err != nil {
		return &Error{Pointer: ptr, Offset: start, Problem: "number out of the range of an IEEE 754 double (RFC 7493 §2.2)"}
	}
	return nil
}

func escapePointer(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}
