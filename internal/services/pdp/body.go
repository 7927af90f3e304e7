package pdp

// Reading a request body within its limit, and decoding a check request
// strictly.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

// requestError is a check request that cannot be read, naming the field.
type requestError struct {
	field, msg string
}

func (e *requestError) Error() string { return e.msg }

func badField(field, format string, args ...any) error {
	return &requestError{field: field, msg: fmt.Sprintf(format, args...)}
}

// readBody reads a check request's body: JSON only, at most MaxBody bytes.
func readBody(r *http.Request) ([]byte, error) { return readBodyLimit(r, MaxBody) }

// readAuthZENBody reads an AuthZEN request's body, at most
// --authzen-max-body-bytes.
func (s *Server) readAuthZENBody(r *http.Request) ([]byte, error) {
	return readBodyLimit(r, s.c.AuthZENMaxBody)
}

// readBodyLimit reads a JSON request body of at most limit bytes.
func readBodyLimit(r *http.Request, limit int64) ([]byte, error) {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/json" {
		return nil, badField("Content-Type", "Content-Type must be application/json, got %q", guard.LogValue(r.Header.Get("Content-Type")))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, badField("body", "the body could not be read")
	}
	if int64(len(body)) > limit {
		return nil, badField("body", "body larger than %d bytes", limit)
	}
	return body, nil
}

// decodeRequest reads a check request strictly: I-JSON (RFC 7493: no
// member twice, UTF-8 only, no unpaired surrogate — each would let the PDP
// and a consumer read different requests under one digest), no unknown
// fields, every field present with its type and no null anywhere. The
// error names the field.
func decodeRequest(body []byte) (*policy.Request, error) {
	// One pass: the I-JSON check and the split into members together.
	raw := make(map[string]json.RawMessage, 8) // the request's eight members
	if err := ijson.Members(body, func(name, v []byte) error {
		raw[string(name)] = v
		return nil
	}); err != nil {
		var e *ijson.Error
		if errors.As(err, &e) && e.Member() != "" {
			return nil, badField(e.Member(), "field %q: %s", e.Member(), e.Problem)
		}
		return nil, badField("body", "body is not a JSON object: %v", err)
	}
	var req policy.Request
	fields := []struct {
		name string
		dst  *string
	}{
		{"system", &req.System}, {"subject", &req.Subject}, {"tenant", &req.Tenant}, {"lane", &req.Lane},
		{"resource", &req.Resource}, {"stage", &req.Stage}, {"purpose", &req.Purpose},
	}
	known := map[string]bool{"fields": true}
	for _, f := range fields {
		known[f.name] = true
		v, ok := raw[f.name]
		if !ok || string(v) == "null" {
			return nil, badField(f.name, "field %q is required", f.name)
		}
		str, ok := ijson.String(v)
		if !ok {
			return nil, badField(f.name, "field %q must be a string", f.name)
		}
		*f.dst = str
		if *f.dst == "" && f.name != "purpose" {
			return nil, badField(f.name, "field %q may not be empty", f.name)
		}
	}
	v, ok := raw["fields"]
	if !ok || string(v) == "null" {
		return nil, badField("fields", `field "fields" is required`)
	}
	req.Fields = []string{}
	var notString error
	if err := ijson.Elements(v, func(e []byte) error {
		// A null element would otherwise become "" in the record.
		f, ok := ijson.String(e)
		if !ok {
			notString = badField("fields", `field "fields": element %d must be a string, not %s`, len(req.Fields), guard.LogValue(string(e)))
			return notString
		}
		req.Fields = append(req.Fields, f)
		return nil
	}); notString != nil {
		return nil, notString
	} else if err != nil {
		return nil, badField("fields", `field "fields" must be a list of strings`)
	}
	for k := range raw {
		if !known[k] {
			return nil, badField(k, "unknown field %q", guard.LogValue(k))
		}
	}
	return &req, nil
}

func readCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
