package demo

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/loopback"
)

// The server side: verification scenarios. Each builds its authenticator
// the way a service would, against the dev issuer served on loopback.

const demoAudience = "vmafx-controller"

// tokenReview verifies through the TokenReview API, using the kubeconfig
// `callerauth issuer serve` writes.
func (e *env) tokenReview() (authn.Authenticator, error) {
	return kube.New(kube.Config{Kubeconfig: e.iss.KubeconfigFile(), Audiences: []string{demoAudience}})
}

// outcome verifies an Authorization header and says what happened, in the
// reason vocabulary.
func outcome(ctx context.Context, a authn.Authenticator, header []string) (*authn.Caller, string, error) {
	id := guard.Identify(ctx, authn.Layer{Authenticator: a}, bearer.Parse(header))
	return id.Caller(), id.Reason().String(), id.Err()
}

func refusal(r Result, want string, reason string, err error) Result {
	if reason == "" {
		r.Observed = "accepted"
		return r
	}
	r.Observed = reason
	if err != nil {
		r.Observed += " (" + detail(err, reason) + ")"
	}
	r.Pass = reason == want
	return r
}

var attempt = regexp.MustCompile(`TokenReview( \(attempt \d+[^)]*\))?: `)

// detail shortens an error for the table: the class is already shown, and
// the API server's wrapping adds nothing a reader needs here.
func detail(err error, reason string) string {
	s := strings.TrimPrefix(err.Error(), "authn: "+reason+": ")
	s = attempt.ReplaceAllString(s, "")
	s = strings.TrimSuffix(strings.TrimPrefix(s, "[invalid bearer token, "), "]")
	if i := strings.LastIndex(s, ": "); strings.HasPrefix(s, "Post ") && i >= 0 {
		s = s[i+2:]
	}
	if r := []rune(s); len(r) > 72 {
		s = string(r[:71]) + "…"
	}
	return s
}

func (e *env) mintFor(req devissuer.TokenRequest) (string, error) {
	if req.Namespace == "" {
		req.Namespace, req.ServiceAccount = "vmafx", "vmafx-operator"
	}
	if req.Audiences == nil {
		req.Audiences = []string{demoAudience}
	}
	tok, err := e.iss.Mint(req)
	return tok.Token, err
}

func verifyTokenReview(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: bound token via TokenReview", Expected: "accepted; caller, pod and node named"}
	a, err := e.tokenReview()
	if err != nil {
		return fail(r, err)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{Pod: "vmafx-operator-0", Node: "node-a"})
	if err != nil {
		return fail(r, err)
	}
	c, reason, err := outcome(ctx, a, []string{"Bearer " + tok})
	if c == nil {
		return refusal(r, "", reason, err)
	}
	r.Observed = fmt.Sprintf("%s pod=%s node=%s aud=%v", strings.TrimPrefix(c.Username, "system:serviceaccount:"), c.PodName, c.NodeName, c.Audiences)
	r.Pass = c.Username == "system:serviceaccount:vmafx:vmafx-operator" && c.PodName == "vmafx-operator-0" && c.NodeName == "node-a"
	return r
}

func verifyOffline(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: same token via JWKS, offline", Expected: "accepted; same caller as TokenReview"}
	a, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: e.iss.Issuer(), DiscoveryURL: e.issURL, CAFile: e.iss.CAFile(), Audiences: []string{demoAudience}}}})
	if err != nil {
		return fail(r, err)
	}
	tr, err := e.tokenReview()
	if err != nil {
		return fail(r, err)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{Pod: "vmafx-operator-0", Node: "node-a"})
	if err != nil {
		return fail(r, err)
	}
	off, reason, err := outcome(ctx, a, []string{"Bearer " + tok})
	if off == nil {
		return refusal(r, "", reason, err)
	}
	on, _, err := outcome(ctx, tr, []string{"Bearer " + tok})
	if on == nil {
		return fail(r, err)
	}
	same := fmt.Sprintf("%+v", *off) == fmt.Sprintf("%+v", *on)
	r.Observed = fmt.Sprintf("%s, identical to TokenReview's: %t", strings.TrimPrefix(off.Username, "system:serviceaccount:"), same)
	r.Pass = same
	return r
}

func refuseExpired(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: expired token", Expected: "token_invalid"}
	a, err := e.tokenReview()
	if err != nil {
		return fail(r, err)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{Lifetime: 10 * time.Minute, IssuedAt: time.Now().Add(-15 * time.Minute)})
	if err != nil {
		return fail(r, err)
	}
	_, reason, err := outcome(ctx, a, []string{"Bearer " + tok})
	return refusal(r, "token_invalid", reason, err)
}

func refuseWrongAudience(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: token minted for another service", Expected: "token_invalid"}
	a, err := e.tokenReview()
	if err != nil {
		return fail(r, err)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{Audiences: []string{"flex-auth"}})
	if err != nil {
		return fail(r, err)
	}
	_, reason, err := outcome(ctx, a, []string{"Bearer " + tok})
	return refusal(r, "token_invalid", reason, err)
}

func refuseDeletedPod(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: token of a deleted pod", Expected: "token_invalid (TokenReview sees deletion)"}
	a, err := e.tokenReview()
	if err != nil {
		return fail(r, err)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{Pod: "short-lived", Node: "node-a"})
	if err != nil {
		return fail(r, err)
	}
	if _, reason, err := outcome(ctx, a, []string{"Bearer " + tok}); reason != "" {
		return refusal(r, "accepted before deletion", reason, err)
	}
	if err := e.iss.DeletePod("vmafx", "short-lived"); err != nil {
		return fail(r, err)
	}
	_, reason, err := outcome(ctx, a, []string{"Bearer " + tok})
	return refusal(r, "token_invalid", reason, err)
}

// reviewOncePerInterval is --caller-review-interval: offline verification
// against the issuer's JWKS, a TokenReview at a credential's first sight
// and once per interval; a deleted pod's token refused after the interval.
func reviewOncePerInterval(ctx context.Context, e *env) Result {
	const interval = 300 * time.Millisecond
	r := Result{Scenario: "server: TokenReview once per credential per interval", Expected: "20 checks, 1 TokenReview; deleted pod refused after the interval"}
	kcfg := kube.Config{Kubeconfig: e.iss.KubeconfigFile(), Audiences: []string{demoAudience}, Issuers: []string{e.iss.Issuer()}}
	review, err := kube.New(kcfg)
	if err != nil {
		return fail(r, err)
	}
	reviews := 0
	counting := authn.AuthenticatorFunc(func(ctx context.Context, tok string) (*authn.Caller, error) {
		reviews++
		return review.Authenticate(ctx, tok)
	})
	offline, err := kube.Offline(kcfg)
	if err != nil {
		return fail(r, err)
	}
	a, err := authn.NewRecheck(authn.RecheckConfig{Offline: offline.Layer(), Review: authn.Layer{Authenticator: counting}, Interval: interval})
	if err != nil {
		return fail(r, err)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{Pod: "rechecked", Node: "node-a"})
	if err != nil {
		return fail(r, err)
	}
	for range 20 {
		if _, reason, err := outcome(ctx, a, []string{"Bearer " + tok}); reason != "" {
			return refusal(r, "accepted", reason, err)
		}
	}
	first := reviews
	if err := e.iss.DeletePod("vmafx", "rechecked"); err != nil {
		return fail(r, err)
	}
	_, within, _ := outcome(ctx, a, []string{"Bearer " + tok})
	time.Sleep(interval)
	_, after, _ := outcome(ctx, a, []string{"Bearer " + tok})
	r.Observed = fmt.Sprintf("20 checks, %d TokenReview; after the deletion: %s within the interval, %s after", first, orAccepted(within), orAccepted(after))
	r.Pass = first == 1 && within == "" && after == authn.TokenInvalid.String()
	return r
}

func orAccepted(reason string) string {
	if reason == "" {
		return "accepted"
	}
	return reason
}

func refuseMalformed(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: Authorization header duplicated", Expected: "malformed_credentials"}
	a, err := e.tokenReview()
	if err != nil {
		return fail(r, err)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{})
	if err != nil {
		return fail(r, err)
	}
	_, reason, err := outcome(ctx, a, []string{"Bearer " + tok, "Bearer " + tok})
	return refusal(r, bearer.ReasonMalformed.String(), reason, err)
}

// refuses verifies a fresh, valid token with a, which must refuse it with
// the class want: the validator, not the token, is at fault.
func (e *env) refuses(ctx context.Context, r Result, a authn.Authenticator, newErr error, want string) Result {
	if newErr != nil {
		return fail(r, newErr)
	}
	tok, err := e.mintFor(devissuer.TokenRequest{})
	if err != nil {
		return fail(r, err)
	}
	_, reason, err := outcome(ctx, a, []string{"Bearer " + tok})
	return refusal(r, want, reason, err)
}

func validatorUnavailable(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: validator unreachable", Expected: "validator_unavailable"}
	addr, err := loopback.Addr()
	if err != nil {
		return fail(r, err)
	}
	a, err := kube.New(kube.Config{REST: &rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{CAFile: e.iss.CAFile()}},
		Audiences: []string{demoAudience}, Timeout: time.Second})
	return e.refuses(ctx, r, a, err, "validator_unavailable")
}

func validatorTimeout(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: validator slower than the timeout", Expected: "validator_timeout"}
	slow := faults.Wrap(e.iss.Handler())
	slow.Set(faults.Mode{Delay: time.Second})
	srv := httptest.NewTLSServer(slow)
	defer func() { srv.CloseClientConnections(); srv.Close() }()
	reviewer, err := os.ReadFile(e.iss.ReviewerTokenFile())
	if err != nil {
		return fail(r, err)
	}
	a, err := kube.New(kube.Config{REST: &rest.Config{Host: srv.URL, BearerToken: strings.TrimSpace(string(reviewer)), TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		Audiences: []string{demoAudience}, Timeout: 200 * time.Millisecond})
	return e.refuses(ctx, r, a, err, "validator_timeout")
}

func validatorForbidden(ctx context.Context, e *env) Result {
	r := Result{Scenario: "server: reviewer may not create TokenReviews", Expected: "validator_error"}
	// A service account of the cluster, but without the right to review.
	sa, err := e.mintFor(devissuer.TokenRequest{Namespace: "vmafx", ServiceAccount: "no-rights", Audiences: []string{e.iss.Issuer()}})
	if err != nil {
		return fail(r, err)
	}
	a, err := kube.New(kube.Config{REST: &rest.Config{Host: e.issURL, BearerToken: sa, TLSClientConfig: rest.TLSClientConfig{CAFile: e.iss.CAFile()}},
		Audiences: []string{demoAudience}})
	return e.refuses(ctx, r, a, err, "validator_error")
}
