package guard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
)

// Protecting an HTTP handler: the guard reads the bearer token, verifies
// it, asks the rule, and answers a refusal with its reason — the handler
// sees only allowed requests, with the verdict in the context.
func ExampleGuard_Middleware() {
	verify := authn.AuthenticatorFunc(func(_ context.Context, token string) (*authn.Caller, error) {
		if token != "engine-token" {
			return nil, authn.Fail(authn.TokenInvalid, "unknown token")
		}
		return &authn.Caller{Username: "system:serviceaccount:secrets-engine:secrets-engine", Expiry: time.Now().Add(time.Hour)}, nil
	})
	g, err := guard.New(guard.Config{
		Authenticator: authn.Layer{Authenticator: verify},
		Rule:          binding.SystemBinding(map[string]string{"secrets-engine": "system:serviceaccount:secrets-engine:secrets-engine"}),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	// Which system the request speaks for: here, a query parameter.
	extract := func(r *http.Request) (binding.Request, error) {
		return binding.Request{System: r.URL.Query().Get("system")}, nil
	}
	h := g.Middleware(extract)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := guard.FromContext(r.Context())
		fmt.Fprintln(w, "hello", v.Caller.Username)
	}))
	for _, token := range []string{"engine-token", "", "stolen"} {
		req := httptest.NewRequest(http.MethodGet, "/?system=secrets-engine", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	// Output:
	// 200 hello system:serviceaccount:secrets-engine:secrets-engine
	// 401 {"error":"no bearer token: send Authorization: Bearer \u003ctoken\u003e","reason":"token_missing"}
	// 401 {"error":"the token was not accepted (signature, audience, expiry or issuer)","reason":"token_invalid"}
}
