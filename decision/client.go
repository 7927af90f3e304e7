package decision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Client asks a PDP for decisions and believes only signed ones. It fails
// closed: every answer that is not a fresh record signed by one of Keys for
// exactly the request sent — a transport error, a non-200 status, an
// unsigned, wrongly-signed, stale or replayed record — is an error, and
// [Client.Allowed] is false for it.
type Client struct {
	// URL of the check endpoint, e.g. https://flex-auth-secrets-engine.flex-auth.svc.cluster.local.:8443/v1/check
	URL string
	// HTTP carries the request; use credentials.Config.Transport so that
	// the caller's token travels with it. Default http.DefaultClient.
	HTTP *http.Client
	// Profile is the record format the PDP signs. Required.
	Profile Profile
	// Keys are the PDP's verification keys, obtained out of band (a file
	// shipped with the consumer, or fetched over an authenticated channel):
	// keys fetched from the same endpoint that answers would prove nothing.
	Keys jose.JSONWebKeySet
	// MaxAge of an acceptable record. Default 5 minutes.
	MaxAge time.Duration
}

// ErrRefused wraps a PDP that refused to decide (an HTTP error status).
var ErrRefused = errors.New("decision: the PDP refused the request")

// Check sends request (marshalled to JSON) and returns the verified record.
func (c *Client) Check(ctx context.Context, request any) (*Record, error) {
	body, err := json.Marshal(request)
	if err != nil {
		return nil, fmt.Errorf("decision: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("decision: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("decision: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("decision: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Reason, Error string }
		_ = json.Unmarshal(b, &e)
		return nil, fmt.Errorf("%w: %s %s (%s)", ErrRefused, resp.Status, e.Reason, e.Error)
	}
	return Verify(b, VerifyOptions{Profile: c.Profile, Keys: c.Keys, Request: body, MaxAge: c.MaxAge})
}

// Allowed is the fail-closed reading of a Check: true only for a verified
// record whose effect is allow.
func Allowed(r *Record, err error) bool {
	return err == nil && r != nil && r.Effect == Allow
}
