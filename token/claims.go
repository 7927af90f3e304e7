package token

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// NumericDate is a JWT NumericDate (RFC 7519 §2): seconds since the epoch,
// a JSON number — a quoted number, null, an object is not one — finite (an
// IEEE double, RFC 7493 §2.2), possibly fractional (the fraction is kept to
// the nanosecond). Beyond ±2^62 seconds (146 billion years) it is read as
// ±2^62, so that no conversion overflows and every comparison with a real
// time comes out as the number says: an exp of 2^62 or 1e300 never
// expires, as the API server reads it. This is the one rule every reader in
// callerauth applies: the client's expiry pre-check, TokenReview's lifetime
// check and offline verification.
type NumericDate struct{ time.Time }

// maxNumericDate bounds a NumericDate's magnitude, in seconds.
const maxNumericDate = 1 << 62

// ErrNumericDate is a claim that is not a NumericDate.
var ErrNumericDate = errors.New("token: not a NumericDate (a JSON number of seconds)")

// UnmarshalJSON reads a NumericDate strictly.
func (n *NumericDate) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return ErrNumericDate
	}
	t, ok := numericDate(json.Number(b))
	if !ok {
		return ErrNumericDate
	}
	n.Time = t
	return nil
}

// numericDate converts seconds since the epoch, possibly fractional, to a
// time.
func numericDate(n json.Number) (time.Time, bool) {
	if i, err := n.Int64(); err == nil {
		return time.Unix(max(min(i, maxNumericDate), -maxNumericDate), 0), true
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return time.Time{}, false
	}
	if math.Abs(f) >= maxNumericDate {
		return time.Unix(int64(math.Copysign(maxNumericDate, f)), 0), true
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}

// Audience is the aud claim: one string or a list of strings (RFC 7519
// §4.1.3).
type Audience []string

// UnmarshalJSON reads a string or a list of strings.
func (a *Audience) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*a = []string{s}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return errors.New("token: aud is neither a string nor a list of strings")
	}
	*a = l
	return nil
}

// Claims are the registered claims of a JWT, read without verifying it.
type Claims struct {
	Issuer    string       `json:"iss"`
	Subject   string       `json:"sub"`
	Audience  Audience     `json:"aud"`
	Expiry    *NumericDate `json:"exp"`
	NotBefore *NumericDate `json:"nbf"`
	IssuedAt  *NumericDate `json:"iat"`
	ID        string       `json:"jti"`
}

// time returns the claim's time, zero when the claim is absent.
func (n *NumericDate) time() time.Time {
	if n == nil {
		return time.Time{}
	}
	return n.Time
}

// ExpiresAt is exp, zero when absent.
func (c *Claims) ExpiresAt() time.Time { return c.Expiry.time() }

// NotValidBefore is nbf, zero when absent.
func (c *Claims) NotValidBefore() time.Time { return c.NotBefore.time() }

// Issued is iat, zero when absent.
func (c *Claims) Issued() time.Time { return c.IssuedAt.time() }

// MaxLength is the longest token callerauth looks at, in bytes: the bearer
// header reader refuses longer credentials, every authenticator refuses
// longer tokens, and the claims reader does not decode them. Kubernetes
// service-account tokens are about 1 KiB.
const MaxLength = 16 << 10

// Payload returns the decoded payload of a compact JWS (three base64url
// segments, unpadded), without verifying anything. The payload must be an
// I-JSON object: a claim named twice is refused (RFC 7519 §4 lets a parser
// refuse it, and two readers keeping different duplicates would disagree
// on the token's meaning).
func Payload(tok string) ([]byte, error) {
	raw, err := payload(tok)
	if err != nil {
		return nil, err
	}
	if err := ijson.Check(raw); err != nil {
		return nil, fmt.Errorf("token: claims: %w", err)
	}
	return raw, nil
}

// DecodePayload returns the decoded payload of a compact JWS — three
// segments, the payload unpadded base64url of a JSON object — without
// checking it as I-JSON: for a reader that reads one member before the
// token is trusted and the rest with [DecodeClaims] after (authn/oidc).
func DecodePayload(tok string) ([]byte, error) { return payload(tok) }

func payload(tok string) ([]byte, error) {
	if len(tok) > MaxLength {
		return nil, fmt.Errorf("token: longer than %d bytes", MaxLength)
	}
	payload, ok := payloadSegment(tok)
	if !ok {
		return nil, errors.New("token: not a JWT (three dot-separated segments)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, errors.New("token: not a JWT: the payload is not unpadded base64url")
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("token: not a JWT: the payload is not a JSON object")
	}
	return raw, nil
}

// ReadClaims decodes the registered claims of a compact JWS without
// verifying it: to route a token to its issuer, to pre-check its expiry on
// the client, or to read the times of a token a validator has just
// accepted. The dates follow the one [NumericDate] rule.
func ReadClaims(tok string) (*Claims, error) {
	c, _, err := ParseClaims(tok, nil)
	return c, err
}

// ParseClaims is [ReadClaims] that also returns the decoded payload and
// gives every other member to other, when set (see [DecodeClaims]).
func ParseClaims(tok string, other func(name, value []byte) error) (*Claims, []byte, error) {
	raw, err := payload(tok)
	if err != nil {
		return nil, nil, err
	}
	var c Claims
	if err := DecodeClaims(raw, &c, other); err != nil {
		return nil, nil, err
	}
	return &c, raw, nil
}

// DecodeClaims reads the registered claims of a JWT payload in one pass.
// The payload must be an I-JSON object; claim names are matched exactly
// (RFC 7519 §4 and RFC 8259 §8.3: "EXP" is not "exp", where encoding/json
// would take either); iss, sub and jti must be strings, aud a string or a
// list of strings, exp, nbf and iat NumericDates — null is none of these.
// Every other member is given to other, when set, with its raw value.
func DecodeClaims(raw []byte, c *Claims, other func(name, value []byte) error) error {
	return decodeClaims(ijson.Text{}, raw, c, other)
}

// DecodeClaimsOwned is DecodeClaims for a payload handed over: raw is
// never changed afterwards, so the claims' strings are read as substrings
// of it rather than copied one by one (a verifier that decoded the
// payload for this verification alone).
func DecodeClaimsOwned(raw []byte, c *Claims, other func(name, value []byte) error) error {
	return decodeClaims(ijson.OwnText(raw), raw, c, other)
}

// decodeClaims is DecodeClaims reading its strings with text (an
// ijson.Text of raw; the zero Text: a copy each).
func decodeClaims(text ijson.Text, raw []byte, c *Claims, other func(name, value []byte) error) error {
	var dates *[3]NumericDate // exp, nbf, iat: one allocation for the three
	date := func(name string, v []byte, i int, out **NumericDate) error {
		if dates == nil {
			dates = new([3]NumericDate)
		}
		if err := dates[i].UnmarshalJSON(v); err != nil {
			return fmt.Errorf("token: claim %q: %w", name, err)
		}
		*out = &dates[i]
		return nil
	}
	err := ijson.Members(raw, func(name, v []byte) error {
		var err error
		switch string(name) {
		case "iss":
			err = readString(text, "iss", v, &c.Issuer)
		case "sub":
			err = readString(text, "sub", v, &c.Subject)
		case "jti":
			err = readString(text, "jti", v, &c.ID)
		case "aud":
			if s, ok := text.String(v); ok {
				c.Audience = Audience{s}
			} else if l, ok := text.Strings(v); ok {
				c.Audience = l
			} else {
				err = errors.New("token: aud is neither a string nor a list of strings")
			}
		case "exp":
			err = date("exp", v, 0, &c.Expiry)
		case "nbf":
			err = date("nbf", v, 1, &c.NotBefore)
		case "iat":
			err = date("iat", v, 2, &c.IssuedAt)
		default:
			if other != nil {
				err = other(name, v)
			}
		}
		return err
	})
	var ie *ijson.Error
	if errors.As(err, &ie) {
		return fmt.Errorf("token: claims: %w", err)
	}
	return err
}

func readString(text ijson.Text, name string, v []byte, out *string) error {
	s, ok := text.String(v)
	if !ok {
		return fmt.Errorf("token: claim %q is not a string", name)
	}
	*out = s
	return nil
}

// payloadSegment returns the middle of a three-segment compact JWS.
func payloadSegment(tok string) (string, bool) {
	first := strings.IndexByte(tok, '.')
	if first <= 0 {
		return "", false
	}
	rest := tok[first+1:]
	second := strings.IndexByte(rest, '.')
	if second <= 0 || strings.IndexByte(rest[second+1:], '.') >= 0 {
		return "", false
	}
	return rest[:second], true
}
