package kube_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/reason"
	"github.com/callerauth/callerauth/token"
)

const aud = "platform-connector"

type env struct {
	iss    *devissuer.Issuer
	faults *faults.Handler
	rest   *rest.Config
	srv    *httptest.Server
}

// start serves the dev issuer's API behind a fault switch over TLS on
// loopback, and returns a REST config that reviews as its reviewer.
func start(t *testing.T, handler http.Handler) *env {
	t.Helper()
	iss, err := devissuer.Open(t.TempDir(), devissuer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if handler == nil {
		handler = iss.Handler()
	}
	fh := faults.Wrap(handler)
	srv := httptest.NewUnstartedServer(fh)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	reviewer, err := os.ReadFile(iss.ReviewerTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return &env{iss: iss, faults: fh, srv: srv, rest: &rest.Config{
		Host:            srv.URL,
		BearerToken:     strings.TrimSpace(string(reviewer)),
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})},
	}}
}

func (e *env) authenticator(t *testing.T, cfg kube.Config) *kube.Authenticator {
	t.Helper()
	if cfg.REST == nil {
		cfg.REST = e.rest
	}
	if cfg.Audiences == nil {
		cfg.Audiences = []string{aud}
	}
	a, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (e *env) mint(t *testing.T, req devissuer.TokenRequest) devissuer.Token {
	t.Helper()
	if req.Namespace == "" {
		req.Namespace, req.ServiceAccount = "nvsentinel", "gpu-monitor"
	}
	if req.Audiences == nil {
		req.Audiences = []string{aud}
	}
	tok, err := e.iss.Mint(req)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

const reviews = devissuer.PathTokenReviews

func TestAcceptedCaller(t *testing.T) {
	e := start(t, nil)
	a := e.authenticator(t, kube.Config{Audiences: []string{"other", aud}, Tenant: "cluster-a"})
	tok := e.mint(t, devissuer.TokenRequest{Pod: "gpu-monitor-1", Node: "node-a"})
	c, err := a.Authenticate(context.Background(), tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	k := tok.Claims.Kubernetes
	want := authn.Caller{
		Username: "system:serviceaccount:nvsentinel:gpu-monitor", UID: k.ServiceAccount.UID,
		Groups:    []string{"system:serviceaccounts", "system:serviceaccounts:nvsentinel", "system:authenticated"},
		Audiences: []string{aud},
		PodName:   "gpu-monitor-1", PodUID: k.Pod.UID, NodeName: "node-a", NodeUID: k.Node.UID,
		CredentialID: "JTI=" + tok.Claims.ID, Tenant: "cluster-a", Issuer: devissuer.DefaultIssuer,
		IssuedAt: tok.Claims.IssuedAt.Time(), Expiry: tok.Claims.Expiry.Time(),
	}
	if got := fmt.Sprintf("%+v", *c); got != fmt.Sprintf("%+v", want) {
		t.Fatalf("caller\n got %s\nwant %s", got, fmt.Sprintf("%+v", want))
	}
	if e.faults.Count(reviews) != 1 {
		t.Fatalf("%d reviews", e.faults.Count(reviews))
	}
}

func TestRefusedTokens(t *testing.T) {
	e := start(t, nil)
	tok := e.mint(t, devissuer.TokenRequest{Pod: "p", Node: "n"})
	exp := tok.Claims.Expiry.Time()
	other := e.mint(t, devissuer.TokenRequest{})
	tests := []struct {
		name     string
		cfg      kube.Config
		token    string
		want     string
		reviewed bool // whether a TokenReview was spent on it
	}{
		{"wrong audience", kube.Config{Audiences: []string{"flex-auth"}}, tok.Token, "refused without review: token audiences", false},
		{"one second past exp (the API server would allow a minute)", kube.Config{Now: func() time.Time { return exp.Add(time.Second) }}, tok.Token, "refused without review: token expired", false},
		{"garbage, no issuers configured: the API server decides", kube.Config{}, "garbage", "not a JWT", true},
		{"garbage, issuers configured", kube.Config{Issuers: []string{devissuer.DefaultIssuer}}, "garbage", "refused without review: not a service-account JWT", false},
		{"another issuer", kube.Config{Issuers: []string{"https://kubernetes.default.svc.cluster.local"}}, other.Token, "refused without review: iss", false},
		{"empty", kube.Config{}, "", "empty", false},
		{"oversize", kube.Config{}, strings.Repeat("a", token.MaxLength+1), "longer than", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.faults.Count(reviews)
			_, err := e.authenticator(t, tt.cfg).Authenticate(context.Background(), tt.token)
			if authn.ReasonOf(err) != authn.TokenInvalid || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want token_invalid containing %q", err, tt.want)
			}
			if reviewed := e.faults.Count(reviews) != before; reviewed != tt.reviewed {
				t.Fatalf("reviewed: %v; want %v", reviewed, tt.reviewed)
			}
		})
	}
	t.Run("the configured issuer's token is reviewed and accepted", func(t *testing.T) {
		if _, err := e.authenticator(t, kube.Config{Issuers: []string{devissuer.DefaultIssuer}}).Authenticate(context.Background(), other.Token); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the oversize token never reaches the validator", func(t *testing.T) {
		before := e.faults.Count(reviews)
		_, _ = e.authenticator(t, kube.Config{}).Authenticate(context.Background(), strings.Repeat("a", token.MaxLength+1))
		if e.faults.Count(reviews) != before {
			t.Fatal("a review was made")
		}
	})
	t.Run("a deleted pod's token", func(t *testing.T) {
		a := e.authenticator(t, kube.Config{})
		if _, err := a.Authenticate(context.Background(), tok.Token); err != nil {
			t.Fatal(err)
		}
		if err := e.iss.DeletePod("nvsentinel", "p"); err != nil {
			t.Fatal(err)
		}
		_, err := a.Authenticate(context.Background(), tok.Token)
		if authn.ReasonOf(err) != authn.TokenInvalid || !strings.Contains(err.Error(), "invalidated") {
			t.Fatalf("err = %v", err)
		}
	})
}

// reviewAnswer serves a fixed TokenReview status, for answers the dev
// issuer never gives.
func reviewAnswer(st authv1.TokenReviewStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr authv1.TokenReview
		_ = json.NewDecoder(r.Body).Decode(&tr)
		tr.Status = st
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(tr)
	})
}

func TestSuspiciousAnswers(t *testing.T) {
	user := authv1.UserInfo{Username: "system:serviceaccount:ns:sa", UID: "u"}
	tests := []struct {
		name string
		st   authv1.TokenReviewStatus
		want reason.Reason
		msg  string
	}{
		{"required audience not echoed", authv1.TokenReviewStatus{Authenticated: true, User: user}, authn.TokenInvalid, "did not confirm"},
		{"another audience echoed", authv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"other"}}, authn.TokenInvalid, "did not confirm"},
		{"ambiguous pod name", authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud}, User: authv1.UserInfo{
			Username: "system:serviceaccount:ns:sa", Extra: map[string]authv1.ExtraValue{authn.ExtraPodName: {"a", "b"}}}}, authn.ValidatorError, "2 values"},
		{"ambiguous node name", authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud}, User: authv1.UserInfo{
			Username: "system:serviceaccount:ns:sa", Extra: map[string]authv1.ExtraValue{authn.ExtraNodeName: {"a", "b"}}}}, authn.ValidatorError, "ambiguous"},
		{"authenticated without a user", authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud}}, authn.ValidatorError, "no user"},
		{"not authenticated, no reason", authv1.TokenReviewStatus{}, authn.TokenInvalid, "not authenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, reviewAnswer(tt.st))
			_, err := e.authenticator(t, kube.Config{}).Authenticate(context.Background(), "opaque-token")
			if authn.ReasonOf(err) != tt.want || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v; want %s containing %q", err, tt.want, tt.msg)
			}
		})
	}
}

// TestFaults: each validator failure maps to its class, none is cached, and
// the cache keeps serving earlier successful verdicts.
func TestFaults(t *testing.T) {
	e := start(t, nil)
	cache := authn.NewCache(e.authenticator(t, kube.Config{Timeout: 1500 * time.Millisecond}).Layer(), authn.CacheConfig{})
	earlier := e.mint(t, devissuer.TokenRequest{})
	if _, err := cache.Authenticate(context.Background(), earlier.Token); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mode faults.Mode
		want reason.Reason
	}{
		{"slow past the timeout", faults.Mode{Delay: 5 * time.Second}, authn.ValidatorTimeout},
		{"500", faults.Mode{Status: http.StatusInternalServerError}, authn.ValidatorError},
		{"403", faults.Mode{Status: http.StatusForbidden}, authn.ValidatorError},
		{"401", faults.Mode{Status: http.StatusUnauthorized}, authn.ValidatorError},
		{"503", faults.Mode{Status: http.StatusServiceUnavailable}, authn.ValidatorUnavailable},
		{"429", faults.Mode{Status: http.StatusTooManyRequests}, authn.ValidatorUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.faults.Set(tt.mode)
			defer e.faults.Set(faults.Mode{})
			fresh := e.mint(t, devissuer.TokenRequest{})
			for range 2 {
				before := e.faults.Count(reviews)
				_, err := cache.Authenticate(context.Background(), fresh.Token)
				if got := authn.ReasonOf(err); got != tt.want {
					t.Fatalf("class %s (%v); want %s", got, err, tt.want)
				}
				if e.faults.Count(reviews) == before {
					t.Fatal("the failure was served from the cache")
				}
			}
			if c, err := cache.Authenticate(context.Background(), earlier.Token); err != nil || c.Username == "" {
				t.Fatalf("earlier verdict not served: %v", err)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		fresh := e.mint(t, devissuer.TokenRequest{})
		e.srv.Close()
		for range 2 {
			_, err := cache.Authenticate(context.Background(), fresh.Token)
			if got := authn.ReasonOf(err); got != authn.ValidatorUnavailable {
				t.Fatalf("class %s (%v); want validator_unavailable", got, err)
			}
		}
		if c, err := cache.Authenticate(context.Background(), earlier.Token); err != nil || c.Username == "" {
			t.Fatalf("earlier verdict not served: %v", err)
		}
		if st := cache.Stats(); st.Hits < 7 {
			t.Fatalf("stats %+v: earlier verdicts not served from the cache", st)
		}
	})
}

func TestUnreachable(t *testing.T) {
	addr, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	a, err := kube.New(kube.Config{REST: &rest.Config{Host: "https://" + addr, BearerToken: "x", TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		Audiences: []string{aud}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Authenticate(context.Background(), "opaque")
	if authn.ReasonOf(err) != authn.ValidatorUnavailable {
		t.Fatalf("err = %v; want validator_unavailable", err)
	}
	if strings.Contains(err.Error(), "opaque") {
		t.Fatal("the error contains the token")
	}
}

func TestReviewerForbidden(t *testing.T) {
	e := start(t, nil)
	// A service account token that authenticates to the API but may not
	// create TokenReviews.
	sa := e.mint(t, devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "nobody", Audiences: []string{e.iss.Issuer()}})
	cfg := rest.CopyConfig(e.rest)
	cfg.BearerToken = sa.Token
	_, err := e.authenticator(t, kube.Config{REST: cfg}).Authenticate(context.Background(), e.mint(t, devissuer.TokenRequest{}).Token)
	if authn.ReasonOf(err) != authn.ValidatorError || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("err = %v; want validator_error (forbidden)", err)
	}
}

func TestRetriesTransientFailures(t *testing.T) {
	iss, err := devissuer.Open(t.TempDir(), devissuer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	flaky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","code":503}`, http.StatusServiceUnavailable)
			return
		}
		iss.Handler().ServeHTTP(w, r)
	})
	e := start(t, flaky)
	e.iss = iss
	reviewer, _ := os.ReadFile(iss.ReviewerTokenFile())
	e.rest.BearerToken = strings.TrimSpace(string(reviewer))
	if _, err := e.authenticator(t, kube.Config{Timeout: 5 * time.Second}).Authenticate(context.Background(), e.mint(t, devissuer.TokenRequest{}).Token); err != nil {
		t.Fatalf("not retried: %v", err)
	}
	if got := e.faults.Count(reviews); got != 3 {
		t.Fatalf("%d attempts; want 3", got)
	}
}

// TestOneReviewForConcurrentFirstRequests: N concurrent first-time requests
// with one new token cause exactly one TokenReview, counted at the server.
func TestOneReviewForConcurrentFirstRequests(t *testing.T) {
	e := start(t, nil)
	e.faults.Set(faults.Mode{Delay: 100 * time.Millisecond}) // keep the first lookup in flight
	cache := authn.NewCache(e.authenticator(t, kube.Config{}).Layer(), authn.CacheConfig{})
	tok := e.mint(t, devissuer.TokenRequest{}).Token
	const n = 50
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range n {
		wg.Go(func() {
			if _, err := cache.Authenticate(context.Background(), tok); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	if got := e.faults.Count(reviews); got != 1 {
		t.Fatalf("%d TokenReviews for %d concurrent requests with one token; want 1", got, n)
	}
}

func TestNewRefusesWhatItCannotHonour(t *testing.T) {
	if _, err := kube.New(kube.Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Errorf("no audiences: %v", err)
	}
	if _, err := kube.New(kube.Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, Audiences: []string{""}}); err == nil {
		t.Error("an empty audience was accepted")
	}
	if _, err := kube.New(kube.Config{Kubeconfig: "/nonexistent/kubeconfig", Audiences: []string{aud}}); err == nil || !strings.Contains(err.Error(), "/nonexistent/kubeconfig") {
		t.Errorf("missing kubeconfig: %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := kube.New(kube.Config{Audiences: []string{aud}}); err == nil || !strings.Contains(err.Error(), "not running in a cluster") {
		t.Errorf("no kubeconfig outside a cluster: %v", err)
	}
}

// TestKubeconfigFromServedIssuer uses the kubeconfig `callerauth issuer
// serve` writes, through client-go's own loader.
func TestKubeconfigFromServedIssuer(t *testing.T) {
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	a, err := kube.New(kube.Config{Kubeconfig: iss.KubeconfigFile(), Audiences: []string{aud}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "ns", ServiceAccount: "sa", Audiences: []string{aud}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := a.Authenticate(context.Background(), tok.Token); err != nil || c.Username != "system:serviceaccount:ns:sa" {
		t.Fatalf("caller %+v err %v", c, err)
	}
}

// TestClientThrottlingIsUnavailable: when the client's own rate limiter
// holds a review back past the deadline (a flood of junk tokens uses up
// QPS/Burst), the verdict is validator_unavailable — the validator was never
// asked — so fail-open rules apply and the metric tells the truth. It was
// validator_error.
func TestClientThrottlingIsUnavailable(t *testing.T) {
	e := start(t, nil)
	a := e.authenticator(t, kube.Config{QPS: 0.5, Burst: 1, Timeout: 300 * time.Millisecond})
	if _, err := a.Authenticate(context.Background(), e.mint(t, devissuer.TokenRequest{}).Token); err != nil {
		t.Fatal(err) // the burst's one review
	}
	_, err := a.Authenticate(context.Background(), e.mint(t, devissuer.TokenRequest{}).Token)
	if authn.ReasonOf(err) != authn.ValidatorUnavailable || !strings.Contains(err.Error(), "rate limiter") {
		t.Fatalf("throttled: %v (%s); want validator_unavailable", err, authn.ReasonOf(err))
	}
	if n := e.faults.Count(reviews); n != 1 {
		t.Fatalf("%d reviews reached the server; the throttled one must not", n)
	}
}

// TestClassIsTheValidatorsNotTheClocks: a validator that answers 503 and
// then stops answering is validator_unavailable — what it said — however
// many retries fit before the deadline (a loaded machine fits fewer). It was
// validator_timeout when the deadline cut the last retry short.
func TestClassIsTheValidatorsNotTheClocks(t *testing.T) {
	var calls atomic.Int64
	var e *env
	e = start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "tokenreviews") && calls.Add(1) == 1 {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"reason":"ServiceUnavailable"}`, http.StatusServiceUnavailable)
			return
		}
		if strings.HasSuffix(r.URL.Path, "tokenreviews") {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		e.iss.Handler().ServeHTTP(w, r)
	}))
	a := e.authenticator(t, kube.Config{Timeout: 700 * time.Millisecond})
	_, err := a.Authenticate(context.Background(), e.mint(t, devissuer.TokenRequest{}).Token)
	if authn.ReasonOf(err) != authn.ValidatorUnavailable || calls.Load() < 2 {
		t.Fatalf("class %s after %d reviews (%v); want validator_unavailable after a retry", authn.ReasonOf(err), calls.Load(), err)
	}
}

// TestOneTokenOneCaller: one token gives one caller, whichever path
// verified it — TokenReview or offline against the API server's JWKS —
// every field compared (Tenant was "" offline).
func TestOneTokenOneCaller(t *testing.T) {
	e := start(t, nil)
	cfg := kube.Config{REST: e.rest, Audiences: []string{"other", aud}, Tenant: "cluster-a", Issuers: []string{devissuer.DefaultIssuer}}
	reviewed := e.authenticator(t, cfg)
	offline, err := kube.Offline(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.mint(t, devissuer.TokenRequest{Pod: "gpu-monitor-1", Node: "node-a"})
	a, err := reviewed.Authenticate(context.Background(), tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	b, err := offline.Authenticate(context.Background(), tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", *a) != fmt.Sprintf("%+v", *b) {
		t.Fatalf("one token, two callers:\nTokenReview %+v\noffline     %+v", *a, *b)
	}
}

// recheck is a Recheck over the dev issuer's real TokenReview and
// /openid/v1/jwks endpoints, as --caller-review-interval builds it.
func (e *env) recheck(t *testing.T, interval time.Duration) *authn.Recheck {
	t.Helper()
	cfg := kube.Config{REST: e.rest, Audiences: []string{aud}, Issuers: []string{devissuer.DefaultIssuer}, MaxKeyAge: time.Second}
	offline, err := kube.Offline(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := authn.NewRecheck(authn.RecheckConfig{Offline: offline.Layer(), Review: e.authenticator(t, cfg).Layer(), Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRecheckWithARetiredKey: the probe's attack, against the dev issuer's
// endpoints. A token for another service account carrying a jti reviewed
// minutes earlier, signed by a key the issuer has since retired, was
// accepted with no TokenReview; and a token of a pod that never existed,
// carrying a reviewed jti, was accepted although TokenReview refuses it.
// Now a remembered review vouches for its own token only, and the retired
// key's tokens are refused once the keys are fetched again.
func TestRecheckWithARetiredKey(t *testing.T) {
	e := start(t, nil)
	r := e.recheck(t, time.Hour)
	ctx := context.Background()
	old := e.mint(t, devissuer.TokenRequest{Pod: "gpu-monitor-1", Node: "node-a"})
	if _, err := r.Authenticate(ctx, old.Token); err != nil {
		t.Fatal(err)
	}
	// A second token with the reviewed jti, for another identity, signed
	// by the same (still current) key: reviewed itself.
	forged := e.mint(t, devissuer.TokenRequest{Namespace: "kube-system", ServiceAccount: "admin-sa", Pod: "never-existed", Node: "node-a", ID: old.Claims.ID})
	if err := e.iss.DeletePod("kube-system", "never-existed"); err != nil {
		t.Fatal(err)
	}
	before := e.faults.Count(reviews)
	if _, err := r.Authenticate(ctx, forged.Token); authn.ReasonOf(err) != authn.TokenInvalid || e.faults.Count(reviews) != before+1 {
		t.Fatalf("another token: %v after %d reviews; want its own review, refused", err, e.faults.Count(reviews)-before)
	}
	// The issuer rotates and retires the old key: the old token is refused
	// once the keys are fetched again (MaxKeyAge 1 s here), although its
	// review was remembered.
	oldKid := e.iss.KeyID()
	if _, err := e.iss.RotateKey(); err != nil {
		t.Fatal(err)
	}
	if err := e.iss.RetireKey(oldKid); err != nil {
		t.Fatal(err)
	}
	if n := r.Remembered(); n != 2 {
		t.Fatalf("%d remembered; want the review and the refusal", n)
	}
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err = r.Authenticate(ctx, old.Token); err != nil {
			break
		}
	}
	// Refused (signing_key_unknown while the refetches that MaxKeyAge 1 s
	// makes keep the unknown-kid window open, token_invalid otherwise), and
	// its review forgotten: only the refusal of the other token remains.
	if reason := authn.ReasonOf(err); (reason != authn.TokenInvalid && reason != authn.SigningKeyUnknown) || r.Remembered() != 1 {
		t.Fatalf("the retired key's token: %v, %d remembered; want it refused and its review forgotten", err, r.Remembered())
	}
}

// TestRotationUnderLoad: the issuer rotates its signing key while eight
// clients call with freshly minted tokens: no valid token is refused
// token_invalid; a token of the new key right after the switch is at worst
// signing_key_unknown (retryable, never cached) until the keys are fetched
// again.
func TestRotationUnderLoad(t *testing.T) {
	e := start(t, nil)
	r := e.recheck(t, time.Hour)
	cache := authn.NewCache(r.Layer(), authn.CacheConfig{TTL: time.Minute, NegativeTTL: 10 * time.Second})
	ctx := context.Background()
	var ok, unavailable, invalid atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for n := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tok := e.mint(t, devissuer.TokenRequest{Pod: fmt.Sprintf("p-%d-%d", n, i), Node: "node-a"})
				_, err := cache.Authenticate(ctx, tok.Token)
				switch authn.ReasonOf(err) {
				case reason.Reason{}:
					ok.Add(1)
				case authn.SigningKeyUnknown:
					unavailable.Add(1)
				default:
					invalid.Add(1)
					t.Errorf("a valid token refused: %v", err)
				}
			}
		})
	}
	for range 3 {
		time.Sleep(400 * time.Millisecond)
		if _, err := e.iss.RotateKey(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(11 * time.Second) // past the refetch interval: the newest key is known
	close(stop)
	wg.Wait()
	t.Logf("%d accepted, %d signing_key_unknown (retryable) around 3 rotations, %d refused", ok.Load(), unavailable.Load(), invalid.Load())
	if invalid.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d valid tokens refused", invalid.Load())
	}
	// Once the keys are fetched again, a fresh token of the newest key
	// verifies.
	if _, err := cache.Authenticate(ctx, e.mint(t, devissuer.TokenRequest{Pod: "after", Node: "node-a"}).Token); err != nil {
		t.Fatalf("after the rotations: %v", err)
	}
}

// TestOfflineLearnsTheIssuer: without Issuers, offline verification reads
// the issuer from the API server's discovery document; a server that
// serves none is an error naming the document and the flag.
func TestOfflineLearnsTheIssuer(t *testing.T) {
	e := start(t, nil)
	offline, err := kube.Offline(kube.Config{REST: e.rest, Audiences: []string{aud}})
	if err != nil {
		t.Fatal(err)
	}
	tok := e.mint(t, devissuer.TokenRequest{Pod: "p", Node: "n"})
	c, err := offline.Authenticate(context.Background(), tok.Token)
	if err != nil || c.Issuer != devissuer.DefaultIssuer {
		t.Fatalf("%+v %v", c, err)
	}
	bare := start(t, http.NotFoundHandler())
	_, err = kube.Offline(kube.Config{REST: bare.rest, Audiences: []string{aud}})
	if err == nil || !strings.Contains(err.Error(), "/.well-known/openid-configuration: HTTP 404") || !strings.Contains(err.Error(), "--caller-issuer") {
		t.Fatalf("no discovery document: %v", err)
	}
}
