package pdp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/kit/cost"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// BenchmarkCheck is one POST /v1/check through the in-process handler: the
// strict decode, caller authentication on a cached verdict, the system
// binding, Cedar evaluation, the record's canonical digest and its
// signature — by an ECDSA P-256 key (ES256, the key callerauth generates)
// and by an Ed25519 key (EdDSA), side by side.
func BenchmarkCheck(b *testing.B) {
	es256, eddsa := filepath.Join(b.TempDir(), "es256.pem"), filepath.Join(b.TempDir(), "eddsa.pem")
	if err := decision.GenerateKeyFileFor(jose.ES256, es256); err != nil {
		b.Fatal(err)
	}
	if err := decision.GenerateKeyFileFor(jose.EdDSA, eddsa); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, key string }{{"ES256", es256}, {"EdDSA", eddsa}} {
		b.Run(tc.name, func(b *testing.B) { benchmarkCheck(b, tc.key) })
	}
}

func benchmarkCheck(b *testing.B, key string) {
	caller := &authn.Caller{Username: "system:serviceaccount:secrets-engine:secrets-engine", Audiences: []string{"flex-auth"},
		CredentialID: "JTI=x", IssuedAt: time.Now(), Expiry: time.Now().Add(time.Hour)}
	o := options(example, "enforce", key)
	o.CallerBindings = []string{"secrets-engine=system:serviceaccount:secrets-engine:secrets-engine"}
	s := newServer(b, o, authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) { return caller, nil }))
	h := s.Handler()
	body := readExample(b, "check_request_allow_rotate.json")
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer token")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkAuthZEN is one AuthZEN request through the in-process handler,
// single and in batches of 10 and 100: strict decode, caller
// authentication on a cached verdict, Cedar per evaluation, one signature
// per request. It reports evaluations per second beside ns/op.
func BenchmarkAuthZEN(b *testing.B) {
	key := filepath.Join(b.TempDir(), "signing.pem")
	if err := decision.GenerateKeyFile(key); err != nil {
		b.Fatal(err)
	}
	const principal = "system:serviceaccount:todo:todo-backend"
	caller := &authn.Caller{Username: principal, Audiences: []string{"flex-auth"}, IssuedAt: time.Now(), Expiry: time.Now().Add(time.Hour)}
	o := options(todo, "enforce", key)
	o.CallerBindings = []string{"todo=" + principal}
	s := newServer(b, o, authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) { return caller, nil }))
	h := s.Handler()
	item := `{"resource":{"type":"todo","id":"t","properties":{"ownerID":"morty@the-citadel.com"}}}`
	for _, n := range []int{1, 10, 100} {
		path := pdp.PathEvaluations
		body := `{"subject":{"type":"user","id":"` + morty + `"},"action":{"name":"can_update_todo"},"evaluations":[` + item
		for range n - 1 {
			body += "," + item
		}
		body += "]}"
		if n == 1 {
			path = pdp.PathEvaluation
			body = `{"subject":{"type":"user","id":"` + morty + `"},"action":{"name":"can_update_todo"},"resource":{"type":"todo","id":"t","properties":{"ownerID":"morty@the-citadel.com"}}}`
		}
		b.Run(map[int]string{1: "single", 10: "batch10", 100: "batch100"}[n], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader([]byte(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer token")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "evaluations/s")
		})
	}
}

// BenchmarkCheckDecisionLog is /v1/check in process from 8 goroutines
// (RunParallel, the decision record signed by group commit), without a
// decision log, with one in an SQLite file queued (best-effort), and with
// one each answer waits for (required: its transaction committed, by
// group commit too).
func BenchmarkCheckDecisionLog(b *testing.B) {
	key := filepath.Join(b.TempDir(), "signing.pem")
	if err := decision.GenerateKeyFile(key); err != nil {
		b.Fatal(err)
	}
	skey, _, err := note.GenerateKey(rand.Reader, "pdp.bench/decisions")
	if err != nil {
		b.Fatal(err)
	}
	logKey := filepath.Join(b.TempDir(), "log.key")
	if err := os.WriteFile(logKey, []byte(skey), 0o600); err != nil {
		b.Fatal(err)
	}
	caller := &authn.Caller{Username: "system:serviceaccount:secrets-engine:secrets-engine", Audiences: []string{"flex-auth"},
		CredentialID: "JTI=x", IssuedAt: time.Now(), Expiry: time.Now().Add(time.Hour)}
	body := readExample(b, "check_request_allow_rotate.json")
	for _, mode := range []string{"off", decisionlog.ModeBestEffort, decisionlog.ModeRequired} {
		b.Run(mode, func(b *testing.B) {
			o := options(example, "enforce", key)
			o.CallerBindings = []string{"secrets-engine=system:serviceaccount:secrets-engine:secrets-engine"}
			if mode != "off" {
				o.DecisionLog.Dir, o.DecisionLog.KeyFile, o.DecisionLog.Mode = filepath.Join(b.TempDir(), "log"), logKey, mode
				o.DecisionLog.CallerMaxEntries = 1 << 40
			}
			s := newServer(b, o, authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) { return caller, nil }))
			if l := s.DecisionLog(); l != nil {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _ = l.Start(ctx); close(done) }()
				defer func() { cancel(); <-done }()
			}
			h := s.Handler()
			b.ReportAllocs()
			b.SetParallelism(4)
			b.ResetTimer()
			cpu := cost.CPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer token")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
				}
			})
			// The process's CPU, the log's writer included: what a check
			// costs the machine, beside what it takes on the clock.
			b.ReportMetric(float64(cost.CPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}
