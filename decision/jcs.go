package decision

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of a
// JSON document: object members sorted by their names' UTF-16 code units,
// no insignificant white space, strings with the minimal escaping of
// ECMAScript's JSON.stringify, and numbers in ECMAScript's shortest
// round-trip form. The same document always yields the same bytes, which is
// what makes a digest of it reproducible by anyone, in any language.
//
// The document must be I-JSON (RFC 7493), as RFC 8785 §3.1 requires: a
// member name used twice, invalid UTF-8 or an unpaired surrogate escape is
// refused, never resolved (encoding/json would keep the last duplicate and
// replace the rest with U+FFFD, so two readers would disagree on what was
// digested).
func Canonicalize(doc []byte) ([]byte, error) {
	if err := ijson.Check(doc); err != nil {
		return nil, fmt.Errorf("decision: canonical JSON: %w", err)
	}
	var b bytes.Buffer
	b.Grow(len(doc))
	if err := writeCanonical(&b, doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// CanonicalJSON marshals v with encoding/json and canonicalizes the result.
func CanonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("decision: %w", err)
	}
	return Canonicalize(raw)
}

// writeCanonical writes v — one value of a document ijson.Check accepted,
// as raw text — in canonical form, walking the text itself: no tree of
// the document is built, and a string that needs no escaping is copied
// as it stands.
func writeCanonical(b *bytes.Buffer, v []byte) error {
	v = bytes.Trim(v, " \t\r\n")
	if len(v) == 0 {
		return errors.New("decision: canonical JSON: an empty value")
	}
	switch v[0] {
	case '{':
		// The names as Walk gives them, decoded: slices of v when they
		// had no escape, so most are not copied.
		type member struct {
			name, value []byte
			ascii       bool // printable ASCII needing no escape
		}
		ms := make([]member, 0, 8)
		if err := ijson.Walk(v, func(name, value []byte) error {
			ms = append(ms, member{name, value, ijson.PlainText(name)})
			return nil
		}); err != nil {
			return fmt.Errorf("decision: canonical JSON: %w", err)
		}
		slices.SortFunc(ms, func(x, y member) int {
			if x.ascii && y.ascii { // one byte, one code unit
				return bytes.Compare(x.name, y.name)
			}
			return compareUTF16(string(x.name), string(y.name))
		})
		b.WriteByte('{')
		for i, m := range ms {
			if i > 0 {
				b.WriteByte(',')
			}
			if m.ascii {
				b.WriteByte('"')
				b.Write(m.name)
				b.WriteByte('"')
			} else {
				writeString(b, string(m.name))
			}
			b.WriteByte(':')
			if err := writeCanonical(b, m.value); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case '[':
		b.WriteByte('[')
		first := true
		if err := ijson.WalkElements(v, func(e []byte) error {
			if !first {
				b.WriteByte(',')
			}
			first = false
			return writeCanonical(b, e)
		}); err != nil {
			return err
		}
		b.WriteByte(']')
	case '"':
		if plain, ok := ijson.Plain(v); ok {
			// Printable ASCII with no escape: canonical as it stands.
			b.WriteByte('"')
			b.Write(plain)
			b.WriteByte('"')
			return nil
		}
		str, ok := ijson.String(v)
		if !ok {
			return fmt.Errorf("decision: canonical JSON: a string that does not read: %.40q", v)
		}
		writeString(b, str)
	case 't', 'f', 'n':
		b.Write(v) // true, false, null: Check accepted nothing else
	default:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return fmt.Errorf("decision: canonical JSON: number %s: %w", v, err)
		}
		s, err := esNumber(f)
		if err != nil {
			return err
		}
		b.WriteString(s)
	}
	return nil
}

// digestString is a SHA-256 sum as records write it, "sha256:" and the
// hex digits, in one allocation.
func digestString(sum [sha256.Size]byte) string {
	const prefix = "sha256:"
	var b [len(prefix) + 2*sha256.Size]byte
	copy(b[:], prefix)
	hex.Encode(b[len(prefix):], sum[:])
	return string(b[:])
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// §3.2.3 requires (it differs from byte order for characters above
// U+FFFF, whose surrogates sort below U+E000–U+FFFF), without encoding
// either: a rune's first code unit, then its second, decides.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return cmp.Compare(utf16Units(ra), utf16Units(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// utf16Units is r's UTF-16 code units as one number that orders as they
// do: the first unit in the high 16 bits, the second (if any) below.
func utf16Units(r rune) uint32 {
	if r < 0x10000 {
		return uint32(r) << 16 //nolint:gosec // r is a valid rune below 0x10000.
	}
	hi, lo := utf16.EncodeRune(r)
	return uint32(hi)<<16 | uint32(lo) //nolint:gosec // surrogates fit 16 bits.
}

// WriteString writes s as an RFC 8785 canonical JSON string, for callers
// that write a document's canonical form directly.
func WriteString(b *bytes.Buffer, s string) { writeString(b, s) }

// QuotedLen is the length of s as WriteString writes it, quotes
// included: what a string costs an answer or a record that carries it.
func QuotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"', r == '\\', r == '\b', r == '\f', r == '\n', r == '\r', r == '\t':
			n += 2
		case r < 0x20:
			n += 6
		case r == utf8.RuneError && size == 1:
			n += len("\ufffd")
		default:
			n += size
		}
		i += size
	}
	return n
}

func writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		case r == utf8.RuneError && size == 1:
			// Invalid UTF-8 (never in a checked document): U+FFFD, as
			// encoding/json writes it.
			b.WriteString("\ufffd")
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// esNumber formats f as ECMAScript's Number.prototype.toString does
// (ECMA-262 §7.1.12.1), which RFC 8785 §3.2.2.3 adopts.
func esNumber(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", errors.New("decision: canonical JSON: NaN and infinities have no JSON form")
	}
	if f == 0 {
		return "0", nil
	}
	neg := f < 0
	if neg {
		f = -f
	}
	// Shortest round-trip digits and the decimal exponent.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, err := strconv.Atoi(expStr)
	if err != nil {
		return "", fmt.Errorf("decision: canonical JSON: %w", err)
	}
	k := len(digits)
	n := exp + 1 // the position of the decimal point relative to the digits
	var s string
	switch {
	case k <= n && n <= 21:
		s = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		s = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		s = "0." + strings.Repeat("0", -n) + digits
	default:
		sign := "+"
		if n-1 < 0 {
			sign = "-"
		}
		ex := n - 1
		if ex < 0 {
			ex = -ex
		}
		if k == 1 {
			s = digits + "e" + sign + strconv.Itoa(ex)
		} else {
			s = digits[:1] + "." + digits[1:] + "e" + sign + strconv.Itoa(ex)
		}
	}
	if neg {
		s = "-" + s
	}
	return s, nil
}
