package guard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/reason"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]guard.Mode{"enforce": guard.Enforce, "audit": guard.Audit} {
		if got, err := guard.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"off", "warn", "ENFORCE", "", " audit"} {
		if _, err := guard.ParseMode(in); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseMode(%q): %v", in, err)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	_, err := guard.New(guard.Config{Mode: "lenient"})
	for _, want := range []string{`mode "lenient"`, "authenticator is required", "rule is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v; want %q", err, want)
		}
	}
}

// TestLogLine: one structured line per decision, with caller, scope,
// reason, mode and cache, and never the token.
func TestLogLine(t *testing.T) {
	const secret = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJzZWNyZXQifQ.c2lnbmF0dXJlLXNlY3JldA"
	var buf bytes.Buffer
	inner := authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		if tok == secret {
			return &authn.Caller{Username: agentSA, PodName: "p", NodeName: "node-b", Expiry: time.Now().Add(time.Hour)}, nil
		}
		return nil, authn.Fail(authn.TokenInvalid, "bad")
	})
	g, _ := newGuard(t, guard.Config{
		Authenticator: authn.NewCache(authn.Layer{Authenticator: inner}, authn.CacheConfig{}).Layer(),
		Rule:          binding.NodeBinding(binding.NodeConfig{LocalNode: localNode}),
		Logger:        slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	ctx := context.Background()
	cred := bearer.Parse([]string{"Bearer " + secret})
	for range 2 {
		g.Check(ctx, cred, binding.NodesRequest([]string{""}))
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines for 2 decisions:\n%s", len(lines), buf.String())
	}
	if strings.Contains(buf.String(), secret) || strings.Contains(buf.String(), "c2lnbmF0dXJl") {
		t.Fatal("the token was logged")
	}
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if first["caller"] != agentSA || first["reason"] != "node_claim_mismatch" || first["mode"] != "enforce" || first["cached"] != false || first["scope"] != "node_local" || first["allowed"] != false {
		t.Errorf("first line %v", first)
	}
	if second["cached"] != true {
		t.Errorf("second decision not marked as cached: %v", second)
	}
}

// TestAllowedIsLoggedByDefault: at the default level (info) an allowed
// decision is logged as a refused one is — one line per decision, as the
// README promises; warn keeps the refusals alone.
func TestAllowedIsLoggedByDefault(t *testing.T) {
	callers := map[string]*authn.Caller{"ok": {Username: "u"}}
	for _, c := range []struct {
		level slog.Level
		lines int
	}{{slog.LevelInfo, 2}, {slog.LevelWarn, 1}} {
		var buf bytes.Buffer
		g, _ := newGuard(t, guard.Config{
			Authenticator: fakeAuth(callers),
			Rule:          binding.SystemBinding(map[string]string{"sys": "u"}),
			Logger:        slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: c.level})),
		})
		g.Check(context.Background(), bearer.Parse([]string{"Bearer ok"}), binding.Request{System: "sys", Method: "POST /v1/check"})
		g.Check(context.Background(), bearer.Parse([]string{"Bearer ok"}), binding.Request{System: "other", Method: "POST /v1/check"})
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != c.lines {
			t.Fatalf("level %s: %d lines for an allowed and a refused decision, want %d:\n%s", c.level, len(lines), c.lines, buf.String())
		}
		var first map[string]any
		_ = json.Unmarshal([]byte(lines[0]), &first)
		if c.level == slog.LevelInfo && (first["msg"] != "callerauth: allowed" || first["allowed"] != true || first["caller"] != "u" || first["method"] != "POST /v1/check") {
			t.Errorf("the allowed decision's line: %v", first)
		}
	}
}

// TestLogLineIsBounded: a request-supplied value is cut, with a marker, so
// an unauthenticated caller cannot write 60 KB log lines.
func TestLogLineIsBounded(t *testing.T) {
	var buf bytes.Buffer
	g, _ := newGuard(t, guard.Config{
		Authenticator: fakeAuth(nil),
		Rule:          binding.SystemBinding(map[string]string{"secrets-engine": "system:serviceaccount:a:b"}),
		Logger:        slog.New(slog.NewJSONHandler(&buf, nil)),
	})
	huge := strings.Repeat("s", 60<<10)
	g.Check(context.Background(), bearer.Parse(nil), binding.Request{System: huge, Method: "POST /" + huge})
	g.Check(context.Background(), bearer.Parse([]string{"Bearer unknown"}), binding.Request{System: "é" + huge})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%.500s", len(lines), buf.String())
	}
	for _, l := range lines {
		if len(l) > 4*guard.MaxLogValue+1024 {
			t.Errorf("a log line of %d bytes", len(l))
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		sys, _ := m["system"].(string)
		if !strings.HasSuffix(sys, "…[truncated, 61440 bytes]") && !strings.HasSuffix(sys, "…[truncated, 61442 bytes]") {
			t.Errorf("system logged as %.80q…", sys)
		}
		if !utf8.ValidString(sys) {
			t.Errorf("the cut split a character: %q", sys[len(sys)-40:])
		}
	}
	if got := guard.LogValue("short"); got != "short" {
		t.Errorf("LogValue(short) = %q", got)
	}
}

// TestStreamInterceptor guards a streaming RPC at its start.
func TestStreamInterceptor(t *testing.T) {
	callers := map[string]*authn.Caller{"ok": {Username: "u"}}
	g, _ := newGuard(t, guard.Config{Authenticator: fakeAuth(callers), Rule: binding.Deny([]reason.Reason{binding.ReasonTokenMissing}, func(s binding.Subject, _ binding.Request) *binding.Violation {
		if s.Caller == nil {
			return &binding.Violation{Reason: binding.ReasonTokenMissing}
		}
		return nil
	})})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(g.StreamServerInterceptor()))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch := func(tok string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if tok != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		}
		s, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if err := watch("ok"); err != nil {
		t.Fatalf("allowed stream: %v", err)
	}
	if err := watch(""); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("tokenless stream: %v", err)
	}
}

func TestVerdictStatusCarriesOnlyTheReason(t *testing.T) {
	v := &guard.Verdict{Reason: authn.TokenInvalid, Detail: "internal: secret detail"}
	st := v.Status()
	if st.Code() != codes.Unauthenticated || st.Message() != "token_invalid" || strings.Contains(st.String(), "secret detail") {
		t.Fatalf("status %v", st)
	}
	for c, want := range map[reason.Code]struct {
		grpc codes.Code
		http int
	}{
		reason.Unauthenticated: {codes.Unauthenticated, 401}, reason.PermissionDenied: {codes.PermissionDenied, 403},
		reason.Unavailable: {codes.Unavailable, 503}, reason.InvalidArgument: {codes.InvalidArgument, 400},
		reason.NotFound: {codes.NotFound, 404}, reason.FailedPrecondition: {codes.FailedPrecondition, 409}, 0: {codes.OK, 200},
		reason.ResourceExhausted: {codes.ResourceExhausted, 429}, reason.Internal: {codes.Internal, 500},
	} {
		if g, h := guard.GRPCCode(c), guard.HTTPStatus(c); g != want.grpc || h != want.http {
			t.Errorf("%v travels as %v and %d; want %v and %d", c, g, h, want.grpc, want.http)
		}
	}
}

// TestMiddlewareRequireIdentity: with RequireIdentity, under enforce, a
// caller without an identity is refused before the extractor runs; under
// audit the extractor runs and the violation is recorded. WithRefusal and
// WithBadRequest shape the answers.
func TestMiddlewareRequireIdentity(t *testing.T) {
	callers := map[string]*authn.Caller{"ok": {Username: "system:serviceaccount:a:b"}}
	for _, mode := range []guard.Mode{guard.Enforce, guard.Audit} {
		t.Run(string(mode), func(t *testing.T) {
			g, _ := newGuard(t, guard.Config{Mode: mode, Authenticator: fakeAuth(callers),
				Rule: binding.SystemBinding(map[string]string{"sys": "system:serviceaccount:a:b"})})
			var extracted int
			var refusedWith string
			h := g.Middleware(func(r *http.Request) (binding.Request, error) {
				extracted++
				if r.Header.Get("X-Bad") != "" {
					return binding.Request{}, errors.New("unreadable")
				}
				return binding.Request{System: "sys"}, nil
			}, guard.RequireIdentity(),
				guard.WithRefusal(func(w http.ResponseWriter, _ *http.Request, v *guard.Verdict) {
					refusedWith = v.Reason.String()
					guard.WriteRefusal(w, v)
				}),
				guard.WithBadRequest(func(w http.ResponseWriter, _ *http.Request, err error) {
					http.Error(w, "shaped: "+err.Error(), http.StatusTeapot)
				}))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "reached") }))
			do := func(auth string, bad bool) (int, string) {
				r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
				if auth != "" {
					r.Header.Set("Authorization", auth)
				}
				if bad {
					r.Header.Set("X-Bad", "1")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code, w.Body.String()
			}
			for _, tt := range []struct{ name, auth, reason string }{
				{"no token", "", "token_missing"},
				{"invalid token", "Bearer invalid", "token_invalid"},
				{"not Bearer", "Basic eA==", "malformed_credentials"},
			} {
				extracted, refusedWith = 0, ""
				code, _ := do(tt.auth, false)
				if mode == guard.Enforce && (code != 401 || extracted != 0 || refusedWith != tt.reason) {
					t.Errorf("%s: %d, extracted %d, refused with %q; want 401 %s before extracting", tt.name, code, extracted, refusedWith, tt.reason)
				}
				if mode == guard.Audit && (code != 200 || extracted != 1) {
					t.Errorf("%s under audit: %d, extracted %d; want it through", tt.name, code, extracted)
				}
			}
			if code, body := do("Bearer ok", false); code != 200 || body != "reached" {
				t.Errorf("the good caller: %d %s", code, body)
			}
			if code, body := do("Bearer ok", true); code != http.StatusTeapot || !strings.Contains(body, "shaped: unreadable") {
				t.Errorf("an unreadable request: %d %s", code, body)
			}
		})
	}
}
