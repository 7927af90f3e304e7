package ijson

// Reading strings out of a checked document: decoded, or substrings of
// one copy of it.

import (
	"unicode/utf8"
	"unsafe"
)

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

// PlainText reports whether text (decoded: a member name Walk gave, say)
// is printable ASCII with no '"' or '\\': a JSON string holds it as it
// stands, escaped by nobody.
func PlainText(text []byte) bool { return plain(text) }

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
