package ijson

// The strict scanner: RFC 8259 JSON that is I-JSON (RFC 7493) — no name
// twice in an object, valid UTF-8, no noncharacter — within MaxDepth, with
// the JSON Pointer of the first fault.

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

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
