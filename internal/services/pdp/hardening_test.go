package pdp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/malformed"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// TestAnotherTenantIsDenied is the probe that found the hole: a valid
// secrets-engine caller naming a tenant and lane the registry does not
// relate to the resource got a signed allow. Now the registry denies it,
// with a reason of its own, in a record that still verifies.
func TestAnotherTenantIsDenied(t *testing.T) {
	e := start(t, "enforce", nil)
	tok := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	for _, tt := range []struct{ name, body, reason string }{
		{"the probe", `{"system":"secrets-engine","subject":"svc-rotator","tenant":"evil-corp","lane":"billing","resource":"db-password","stage":"rotate","fields":["password"],"purpose":"x"}`, "tenant_unknown"},
		{"a real tenant that does not hold the lane", `{"system":"secrets-engine","subject":"svc-rotator","tenant":"globex","lane":"catalog","resource":"db-password","stage":"rotate","fields":["password"],"purpose":"x"}`, "lane_not_in_tenant"},
		{"a lane that does not hold the resource", `{"system":"secrets-engine","subject":"svc-rotator","tenant":"acme","lane":"billing","resource":"db-password","stage":"rotate","fields":["password"],"purpose":"x"}`, "resource_not_in_lane"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := e.post(t, tok, []byte(tt.body), "application/json")
			rec, err := decision.Verify(body, decision.VerifyOptions{Profile: pdp.RecordProfile, Keys: e.keys, Request: []byte(tt.body)})
			if code != 200 || err != nil || rec.Effect != decision.Deny || rec.Reason != tt.reason {
				t.Fatalf("%d %v %+v; want a verified deny %s", code, err, rec, tt.reason)
			}
		})
	}
}

// TestNothingIsReadBeforeTheCaller: under enforce, a caller without an
// identity is refused from the header alone; the body is never read, so
// it learns nothing about the request format.
func TestNothingIsReadBeforeTheCaller(t *testing.T) {
	e := start(t, "enforce", nil)
	for _, tt := range []struct {
		name, auth, reason string
	}{
		{"no Authorization header", "", "token_missing"},
		{"a token the validator refuses", "Bearer " + e.token(t, "secrets-engine", "another-audience", time.Time{}), "token_invalid"},
		{"not Bearer", "Basic dXNlcjpwYXNz", "malformed_credentials"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := &watchedBody{r: strings.NewReader(`{"colour":"red"}`)}
			req := httptest.NewRequest(http.MethodPost, "/v1/check", body)
			req.Header.Set("Content-Type", "text/plain")
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			e.srv.Handler().ServeHTTP(w, req)
			var eb map[string]string
			_ = json.Unmarshal(w.Body.Bytes(), &eb)
			if w.Code != 401 || eb["reason"] != tt.reason || eb["field"] != "" {
				t.Fatalf("%d %s; want 401 %s and no word about the body", w.Code, w.Body, tt.reason)
			}
			if body.read {
				t.Fatal("the body was read before the caller was authenticated")
			}
		})
	}
	// Under warn the unauthenticated caller reaches policy, so its body is
	// read: that is what warn means.
	w := start(t, "warn", nil)
	code, _ := w.post(t, "", readExample(t, "check_request_allow_rotate.json"), "application/json")
	if code != 200 {
		t.Fatalf("warn: %d", code)
	}
}

type watchedBody struct {
	r    io.Reader
	read bool
}

func (b *watchedBody) Read(p []byte) (int, error) { b.read = true; return b.r.Read(p) }

// TestRequestsAreIJSON: a check request is refused, naming the member,
// when two readers could take it differently — a member twice (the PDP
// kept the last, a consumer may keep the first), a null where a string
// belongs (it became ""), invalid UTF-8 or an unpaired surrogate (they
// became U+FFFD and the record still verified).
func TestRequestsAreIJSON(t *testing.T) {
	e := start(t, "enforce", nil)
	tok := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	allow := string(readExample(t, "check_request_allow_rotate.json"))
	for _, tt := range []struct{ name, body, field, detail string }{
		{"system twice", strings.Replace(allow, `"system": "secrets-engine",`, `"system": "ops-warden", "system": "secrets-engine",`, 1), "system", "more than once"},
		{"fields twice, the allowed one last", strings.Replace(allow, `"fields": ["password"]`, `"fields": ["private_key"], "fields": ["password"]`, 1), "fields", "more than once"},
		{"a null field name", strings.Replace(allow, `["password"]`, `[null]`, 1), "fields", "element 0 must be a string"},
		{"a number field name", strings.Replace(allow, `["password"]`, `["password", 7]`, 1), "fields", "element 1 must be a string"},
		{"invalid UTF-8", strings.Replace(allow, `scheduled rotation`, "scheduled \xff rotation", 1), "purpose", "invalid UTF-8"},
		{"a lone surrogate", strings.Replace(allow, `scheduled rotation`, `scheduled \ud800 rotation`, 1), "purpose", "unpaired surrogate"},
		{"a null string", strings.Replace(allow, `"scheduled rotation"`, `null`, 1), "purpose", "required"},
		{"a number for a string", strings.Replace(allow, `"scheduled rotation"`, `7`, 1), "purpose", "must be a string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.body == allow {
				t.Fatal("the edit did not apply")
			}
			code, body := e.post(t, tok, []byte(tt.body), "application/json")
			var eb map[string]string
			_ = json.Unmarshal(body, &eb)
			if code != 400 || eb["field"] != tt.field || eb["reason"] != "bad_request" || !strings.Contains(eb["error"], tt.detail) {
				t.Fatalf("%d %s; want 400 naming %q with %q", code, body, tt.field, tt.detail)
			}
		})
	}
}

// TestBindingWarnings: a principal no ServiceAccount token can produce is
// warned about at start-up, naming the flag.
func TestBindingWarnings(t *testing.T) {
	var buf capture.Buffer
	start(t, "enforce", func(o *pdp.Options) {
		o.CallerBindings = append(o.CallerBindings, "foo=secrets-engine:secrets-engine")
		o.Serve.LogOutput = &buf
	})
	if !strings.Contains(buf.String(), `--caller-binding \"foo=secrets-engine:secrets-engine\": principal \"secrets-engine:secrets-engine\" is not a service-account username`) {
		t.Fatalf("no warning in %s", buf.String())
	}
}

// TestSlowAndIdleClientsAreCutOff runs the real server with short limits:
// a client trickling its body, one leaving a keep-alive connection idle and
// one sending a 1 MiB header are each cut off, where before they held a
// connection (and a goroutine) for as long as they liked.
func TestSlowAndIdleClientsAreCutOff(t *testing.T) {
	addr, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	limits := serve.HTTPLimits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 2 * time.Second,
		IdleTimeout: 300 * time.Millisecond, MaxHeaderBytes: 8 << 10}
	e := start(t, "enforce", func(o *pdp.Options) { o.Serve.Listen, o.Serve.HTTP = addr, limits })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	dial := func(t *testing.T) net.Conn {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
		}
	}
	tok := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	// closedBy waits (10 s at most, far beyond every limit) for the server
	// to close the connection; it fails if the server holds it open.
	closedBy := func(t *testing.T, c net.Conn, r *bufio.Reader) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := r.ReadByte(); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("the server kept the connection open")
				}
				return // EOF or reset: closed by the server
			}
		}
	}
	t.Run("a body trickled", func(t *testing.T) {
		c := dial(t)
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"sys", tok)
		closedBy(t, c, bufio.NewReader(c))
	})
	t.Run("headers trickled", func(t *testing.T) {
		c := dial(t)
		defer c.Close()
		fmt.Fprint(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\n")
		closedBy(t, c, bufio.NewReader(c))
	})
	t.Run("a keep-alive connection left idle", func(t *testing.T) {
		c := dial(t)
		defer c.Close()
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("healthz: %d, close %v", resp.StatusCode, resp.Close)
		}
		closedBy(t, c, r)
	})
	t.Run("a 1 MiB Authorization header", func(t *testing.T) {
		c := dial(t)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", strings.Repeat("a", 1<<20))
		}()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d; want 431", resp.StatusCode)
		}
	})
}

// TestMetricsSpeakThePDPsLanguage: the pdp has no node binding, so it
// exports no node-binding series (they never move); it does export the
// guard's violations and its own series.
func TestMetricsSpeakThePDPsLanguage(t *testing.T) {
	e := start(t, "enforce", nil)
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if strings.Contains(mf.GetName(), "node_claim") || strings.HasSuffix(mf.GetName(), "_auth_decisions_total") {
			t.Errorf("the pdp exports the node-binding series %s", mf.GetName())
		}
	}
	for _, want := range []string{"pdp_auth_violations_total", "pdp_auth_mode", "go_goroutines", "process_open_fds"} {
		if !names[want] {
			t.Errorf("no %s", want)
		}
	}
}

// TestMalformedFramingIsRefusedAtOnce: the pdp's API and its metrics
// listener, served by Run with read timeouts of minutes, answer every
// malformed HTTP/1.x framing (internal/kit/malformed: both framings, bad
// chunks, a body on a method that has none, trailers, folded lines) at
// once and close its connection — with a token the guard accepts (the
// body is read) and without one (refused before it is) — and answer a
// well-framed pipelined pair whole. On ae46db4 both framings with a body
// framed by its length were answered only at the read timeout (15 s by
// default).
func TestMalformedFramingIsRefusedAtOnce(t *testing.T) {
	addr, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	limits := serve.HTTPLimits{ReadHeaderTimeout: 5 * time.Minute, ReadTimeout: 5 * time.Minute, WriteTimeout: 5 * time.Minute, IdleTimeout: 5 * time.Minute, MaxHeaderBytes: 32 << 10}
	e := start(t, "enforce", func(o *pdp.Options) { o.Serve.Listen, o.Serve.MetricsListen, o.Serve.HTTP = addr, metrics, limits })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, a := range []string{addr, metrics} {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if c, err := net.Dial("tcp", a); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never listened", a)
			}
		}
	}
	tok := e.token(t, "secrets-engine", "flex-auth", time.Time{})
	allow := string(bytes.TrimSpace(readExample(t, "check_request_allow_rotate.json")))
	t.Run("the API, a caller it accepts", func(t *testing.T) {
		malformed.Check(t, malformed.TCPDialer(addr), addr, "/v1/check", "Bearer "+tok, allow)
	})
	t.Run("the API, no token", func(t *testing.T) { malformed.Check(t, malformed.TCPDialer(addr), addr, "/v1/check", "", "") })
	t.Run("the metrics listener", func(t *testing.T) { malformed.Check(t, malformed.TCPDialer(metrics), metrics, "/healthz", "", "{}") })
}
