package ijson

// Walking a document already checked: its members, its elements, one
// member by name, without checking again.

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

// WalkElements calls fn with each element of the array doc, as
// [Elements] does, for a doc that is already known to be I-JSON (see
// [Walk]): nothing is checked again, each element is skipped by matching
// its brackets. Never use it on a doc that was never checked.
func WalkElements(doc []byte, fn func(value []byte) error) error {
	s := scanner{b: doc, loose: true, checked: true}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return s.fail("not a JSON array")
	}
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		return nil
	}
	for {
		start := s.i
		s.i = skip(s.b, s.i)
		if err := fn(s.b[start:s.i]); err != nil {
			return err
		}
		more, ok := s.afterElement()
		switch {
		case !ok:
			return s.fail("expected ',' or ']' after an array element")
		case !more:
			return nil
		}
	}
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
