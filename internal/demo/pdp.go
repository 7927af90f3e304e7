package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	secretsengine "github.com/callerauth/callerauth/examples/secrets-engine"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// The policy decision point (docs/pdp.md), in-process, with the
// secrets-engine example package, against the dev issuer by TokenReview.

const sePrincipal = "system:serviceaccount:secrets-engine:secrets-engine"

// seRequest is examples/secrets-engine/check_request_allow_rotate.json.
var seRequest = secretsengine.AllowRequest()

type pdpEnv struct {
	url  string
	keys decision.VerifyOptions
	stop func()
}

func (e *env) startPDP(mode string) (*pdpEnv, error) {
	s, url, stop, err := e.servePDP("pdp-"+mode, secretsengine.WriteTo, mode, "secrets-engine="+sePrincipal)
	if err != nil {
		return nil, err
	}
	return &pdpEnv{url: url, keys: decision.VerifyOptions{Profile: pdp.RecordProfile, Keys: s.Signer().JWKS(), Request: seRequest}, stop: stop}, nil
}

// servePDP writes an example package (writeTo), makes a signing key, and
// serves a pdp in mode with the binding, reviewing tokens against the dev
// issuer, on a loopback httptest server.
func (e *env) servePDP(name string, writeTo func(dir string) (string, string, error), mode, binding string, edits ...func(dir string, o *pdp.Options) error) (*pdp.Server, string, func(), error) {
	dir, err := os.MkdirTemp(e.dir, name+"-")
	if err != nil {
		return nil, "", nil, err
	}
	policyDir, registry, err := writeTo(dir)
	if err != nil {
		return nil, "", nil, err
	}
	key := filepath.Join(dir, "signing.pem")
	if err := decision.GenerateKeyFile(key); err != nil {
		return nil, "", nil, err
	}
	o := pdp.NewOptions()
	o.Serve.Listen, o.Serve.MetricsListen, o.Serve.LogOutput, o.InsecureHTTP = "127.0.0.1:0", "", io.Discard, true
	o.PolicyDir, o.Registry, o.SigningKeyFile = policyDir, registry, key
	o.Callers.Kubeconfig, o.Callers.Mode, o.CallerBindings = e.iss.KubeconfigFile(), mode, []string{binding}
	for _, edit := range edits {
		if err := edit(dir, &o); err != nil {
			return nil, "", nil, err
		}
	}
	c, err := o.Complete()
	if err != nil {
		return nil, "", nil, err
	}
	s, err := pdp.New(c)
	if err != nil {
		return nil, "", nil, err
	}
	hs := httptest.NewServer(s.Handler())
	return s, hs.URL, hs.Close, nil
}

func (p *pdpEnv) check(ctx context.Context, token string) (int, []byte, error) {
	return p.checkBody(ctx, token, seRequest)
}

func (p *pdpEnv) checkBody(ctx context.Context, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/v1/check", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// seTokens are the seed's credentials: the positive one and N1–N4.
func (e *env) seTokens() (map[string]string, error) {
	mint := func(sa, aud string, issuedAt time.Time) (string, error) {
		t, err := e.iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: sa, Audiences: []string{aud}, Lifetime: 10 * time.Minute, IssuedAt: issuedAt})
		return t.Token, err
	}
	out := map[string]string{"N1": ""}
	var err error
	for name, args := range map[string]struct {
		sa, aud string
		at      time.Time
	}{
		"positive": {"secrets-engine", "flex-auth", time.Time{}},
		"N2":       {"default", "flex-auth", time.Time{}},
		"N3":       {"secrets-engine", "other-service", time.Time{}},
		"N4":       {"secrets-engine", "flex-auth", time.Now().Add(-20 * time.Minute)},
	} {
		if out[name], err = mint(args.sa, args.aud, args.at); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type pdpCase struct {
	scenario, expected, token string
	wantCode                  int
	wantReason                string
}

func pdpEnforce(c pdpCase) func(context.Context, *env) Result {
	return func(ctx context.Context, e *env) Result {
		r := Result{Scenario: c.scenario, Expected: c.expected}
		p, err := e.startPDP(callers.ModeEnforce)
		if err != nil {
			return fail(r, err)
		}
		defer p.stop()
		toks, err := e.seTokens()
		if err != nil {
			return fail(r, err)
		}
		code, body, err := p.check(ctx, toks[c.token])
		if err != nil {
			return fail(r, err)
		}
		if code != 200 {
			var eb map[string]string
			_ = json.Unmarshal(body, &eb)
			r.Observed = fmt.Sprintf("%d %s (%s)", code, eb["reason"], eb["error"])
			r.Pass = code == c.wantCode && eb["reason"] == c.wantReason
			return r
		}
		rec, err := decision.Verify(body, p.keys)
		if err != nil {
			return fail(r, err)
		}
		r.Observed = fmt.Sprintf("200 %s %s %s; record verified, caller %s", rec.Effect, rec.Reason, rec.PolicyVersion, strings.TrimPrefix(rec.Caller.Principal, "system:serviceaccount:"))
		r.Pass = c.wantCode == 200 && rec.Effect == "allow" && rec.Caller.Principal == sePrincipal
		return r
	}
}

func pdpWarn(ctx context.Context, e *env) Result {
	r := Result{Scenario: "pdp warn: N1–N4", Expected: "all reach policy; records say what enforce would have"}
	p, err := e.startPDP(callers.ModeWarn)
	if err != nil {
		return fail(r, err)
	}
	defer p.stop()
	toks, err := e.seTokens()
	if err != nil {
		return fail(r, err)
	}
	var seen []string
	r.Pass = true
	for _, n := range []string{"N1", "N2", "N3", "N4"} {
		code, body, err := p.check(ctx, toks[n])
		if err != nil {
			return fail(r, err)
		}
		rec, verr := decision.Verify(body, p.keys)
		if code != 200 || verr != nil || rec.Caller.Authenticated {
			r.Pass = false
			seen = append(seen, fmt.Sprintf("%s:%d", n, code))
			continue
		}
		seen = append(seen, n+"→"+rec.Caller.Reason)
	}
	r.Observed = strings.Join(seen, ", ")
	return r
}

func pdpForged(ctx context.Context, e *env) Result {
	r := Result{Scenario: "pdp: forged allow from a responder without the key", Expected: "consumer client refuses (deny)"}
	p, err := e.startPDP(callers.ModeEnforce)
	if err != nil {
		return fail(r, err)
	}
	defer p.stop()
	// It knows the package id and version — both published — but not the key.
	forger := filepath.Join(e.dir, "forger.pem")
	if err := decision.GenerateKeyFile(forger); err != nil {
		return fail(r, err)
	}
	keys, _ := decision.LoadKeyFile(forger)
	signer, _ := decision.NewSigner(pdp.RecordProfile, keys...)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(req.Body).Decode(&body)
		rec := &decision.Record{DecisionID: "forged", Effect: "allow", Reason: "catalog_lane_policy_matched", PolicyVersion: "v2",
			Provenance: decision.Provenance{Mode: "enforce", PolicyPackageID: "secrets-engine", DecidedAt: time.Now().UTC()}}
		_ = rec.Bind(body)
		signed, _ := signer.Sign(rec)
		_ = json.NewEncoder(w).Encode(signed)
	}))
	defer fake.Close()
	var req map[string]any
	_ = json.Unmarshal(seRequest, &req)
	client := &decision.Client{Profile: pdp.RecordProfile, URL: fake.URL + "/v1/check", Keys: p.keys.Keys}
	rec, err := client.Check(ctx, req)
	allowed := decision.Allowed(rec, err)
	r.Observed = fmt.Sprintf("allowed: %t (%s)", allowed, detail(err, ""))
	r.Pass = !allowed && err != nil
	return r
}

// pdpOtherTenant is the check that once came back a signed allow: a valid
// caller naming a tenant and lane the policy never looked at.
func pdpOtherTenant(ctx context.Context, e *env) Result {
	r := Result{Scenario: "pdp: a check naming another tenant", Expected: "200 deny tenant_unknown, signed record"}
	p, err := e.startPDP(callers.ModeEnforce)
	if err != nil {
		return fail(r, err)
	}
	defer p.stop()
	toks, err := e.seTokens()
	if err != nil {
		return fail(r, err)
	}
	req := bytes.Replace(seRequest, []byte(`"tenant": "acme"`), []byte(`"tenant": "evil-corp"`), 1)
	req = bytes.Replace(req, []byte(`"lane": "catalog"`), []byte(`"lane": "billing"`), 1)
	if bytes.Equal(req, seRequest) {
		return fail(r, fmt.Errorf("the example request names no tenant acme"))
	}
	code, body, err := p.checkBody(ctx, toks["positive"], req)
	if err != nil {
		return fail(r, err)
	}
	opts := p.keys
	opts.Request = req
	rec, err := decision.Verify(body, opts)
	if err != nil {
		return fail(r, fmt.Errorf("%d: %w", code, err))
	}
	r.Observed = fmt.Sprintf("%d %s %s; record verified", code, rec.Effect, rec.Reason)
	r.Pass = code == 200 && rec.Effect == decision.Deny && rec.Reason == "tenant_unknown"
	return r
}

var pdpScenarios = []func(context.Context, *env) Result{
	pdpEnforce(pdpCase{"pdp enforce: positive", "200 allow, signed record names the caller", "positive", 200, ""}),
	pdpEnforce(pdpCase{"pdp enforce: N1 no Authorization", "401 token_missing", "N1", 401, "token_missing"}),
	pdpEnforce(pdpCase{"pdp enforce: N2 wrong service account", "403 principal cannot represent system", "N2", 403, "principal_cannot_represent_system"}),
	pdpEnforce(pdpCase{"pdp enforce: N3 another audience", "401 token_invalid", "N3", 401, "token_invalid"}),
	pdpEnforce(pdpCase{"pdp enforce: N4 past exp", "401 token_invalid", "N4", 401, "token_invalid"}),
	pdpOtherTenant,
	pdpWarn,
	pdpForged,
	pdpAuthZENBatch,
	pdpAuthZENSearch,
	pdpDecisionLog,
}
