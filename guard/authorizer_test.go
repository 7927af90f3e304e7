package guard_test

import (
	"context"
	"testing"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/reason"
)

var reasonRemoteDenied = reason.New("remote_denied", reason.PermissionDenied, "the remote authority refused")

// remote is an Authorizer that refuses "intruder" and records what it saw.
type remote struct{ asked []binding.Subject }

func (r *remote) Reasons() []reason.Reason { return []reason.Reason{reasonRemoteDenied} }
func (r *remote) Authorize(ctx context.Context, s binding.Subject, _ binding.Request) *binding.Violation {
	r.asked = append(r.asked, s)
	if ctx.Value(ctxKey{}) != "the request's" {
		return &binding.Violation{Reason: reasonRemoteDenied, Detail: "not the request's context"}
	}
	if s.Caller == nil || s.Caller.Username == "intruder" {
		return &binding.Violation{Reason: reasonRemoteDenied, Detail: "no"}
	}
	return nil
}

type ctxKey struct{}

// TestAuthorizer: the authorizer judges what the rule allowed, only that,
// with the request's context; its refusal is counted and audited as the
// rule's, and it sees a degraded subject (no caller) to refuse it.
func TestAuthorizer(t *testing.T) {
	callers := map[string]*authn.Caller{"ok": {Username: "ok"}, "intruder": {Username: "intruder"}, "banned": {Username: "banned"}}
	rule := binding.Deny([]reason.Reason{binding.ReasonTokenMissing}, func(s binding.Subject, _ binding.Request) *binding.Violation {
		if s.Caller != nil && s.Caller.Username == "banned" {
			return &binding.Violation{Reason: binding.ReasonTokenMissing, Detail: "the rule's"}
		}
		return nil
	})
	ctx := context.WithValue(context.Background(), ctxKey{}, "the request's")
	for _, mode := range []guard.Mode{guard.Enforce, guard.Audit} {
		t.Run(string(mode), func(t *testing.T) {
			z := &remote{}
			g, reg := newGuard(t, guard.Config{Mode: mode, Authenticator: fakeAuth(callers), Rule: rule, Authorizer: z, FailOpenOnUnavailable: true})
			check := func(tok string) *guard.Verdict {
				return g.Check(ctx, bearer.Parse(bearerOf(tok)), binding.Request{Method: "GET /x"})
			}
			if v := check("ok"); !v.Allowed || !v.Reason.IsZero() {
				t.Errorf("allowed by both: %+v", v)
			}
			v := check("intruder")
			if v.Reason != reasonRemoteDenied || v.Allowed != (mode == guard.Audit) {
				t.Errorf("refused by the authorizer: %+v", v)
			}
			asked := len(z.asked)
			if v := check("banned"); v.Reason != binding.ReasonTokenMissing || len(z.asked) != asked {
				t.Errorf("refused by the rule: %+v, and the authorizer asked %d times (want %d)", v, len(z.asked), asked)
			}
			if v := check("unavailable"); v.Reason != reasonRemoteDenied || !v.Degraded || z.asked[len(z.asked)-1].Caller != nil {
				t.Errorf("a degraded subject: %+v; the authorizer must see it and refuse it", v)
			}
			vals, err := scrape.Values(reg)
			if err != nil {
				t.Fatal(err)
			}
			if n := vals["platform_connector_auth_violations_total{remote_denied}"]; n != 2 {
				t.Errorf("remote_denied counted %v times, want 2", n)
			}
		})
	}
}
