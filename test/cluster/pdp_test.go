package cluster_test

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/forge"
	"github.com/callerauth/callerauth/internal/services/cli"
)

// TestSeed002PDPOnTheNode: the pdp installed from its chart (enforce),
// called through its Service by pods of the secrets-engine namespace with
// the tokens the kubelet projects into them: the positive check is
// allowed and its record verifies with callerauth decision verify against
// the JWKS the pdp serves; N1–N4 are refused as seed 002 states.
// N4, a token past exp, is the secrets-engine pod's own token with its
// times moved 20 minutes back and signed again with the cluster's
// service-account key (the API server mints none shorter than 10 minutes):
// the API server's TokenReview refuses it, where the same token signed
// again with its times kept is allowed.
func TestSeed002PDPOnTheNode(t *testing.T) {
	readoutOnFailure(t)
	ctx := context.Background()
	const ns, callers, service = "flex-auth", "secrets-engine", "flex-auth-pdp"
	namespace(ctx, t, ns, "restricted")
	cs := node.API.Client
	fqdn := service + "." + ns + ".svc"
	ca := servingSecret(ctx, t, ns, "flex-auth-tls", service, fqdn, fqdn+".cluster.local")
	var keygen bytes.Buffer
	signing := filepath.Join(t.TempDir(), "signing.pem")
	if err := cli.Execute(ctx, &cli.Options{Stdout: &keygen, Stderr: &keygen}, []string{"decision", "keygen", "--out", signing}); err != nil {
		t.Fatalf("decision keygen: %v\n%s", err, keygen.String())
	}
	signingPEM, err := os.ReadFile(signing)
	if err != nil {
		t.Fatal(err)
	}
	secret(ctx, t, ns, "flex-auth-signing", map[string][]byte{"signing.pem": signingPEM})
	install(ctx, t, "pdp", "flex-auth", ns, "restricted", pdpValues(t))

	// The callers, pods of the secrets-engine namespace: its own account's
	// and the namespace's default one, each presenting the token the
	// kubelet projects, through the pdp's Service.
	namespace(ctx, t, callers, "restricted")
	if _, err := cs.CoreV1().ServiceAccounts(callers).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "secrets-engine"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// N4's token: the secrets-engine pod's own, moved back (and, for the
	// control, the same signed again with its times kept).
	holder := createPod(ctx, t, tokenPod("token-holder", callers, "secrets-engine", "token", "flex-auth"))
	if err := poll(ctx, time.Minute, func() error { return podPhase(ctx, holder, corev1.PodRunning) }); err != nil {
		t.Fatal(err)
	}
	projected := readProjectedFrom(t, holder, "token")
	for name, tok := range map[string]string{"expired-token": pastExp(t, projected, 20*time.Minute), "resigned-token": pastExp(t, projected, 0)} {
		secret(ctx, t, callers, name, map[string][]byte{"token": []byte(tok)})
	}
	request, err := os.ReadFile("../../examples/secrets-engine/check_request_allow_rotate.json")
	if err != nil {
		t.Fatal(err)
	}
	configMap(ctx, t, callers, "fetch-ca", map[string]string{"ca.crt": string(ca.PEM)})
	configMap(ctx, t, callers, "fetch-bodies", map[string]string{"check.json": string(request)})
	svc, err := cs.CoreV1().Services(ns).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("https://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	check := func(name, sa, audience, secret string) call {
		return call{name: name, serviceAccount: sa, audience: audience, secret: secret, method: "POST", url: base + "/v1/check", serverName: fqdn, body: "check.json"}
	}
	for _, c := range []struct {
		call   call
		code   int
		reason string
	}{
		{check("n1", "secrets-engine", "", ""), 401, "token_missing"},
		{check("n2", "default", "flex-auth", ""), 403, "principal_cannot_represent_system"},
		{check("n3", "secrets-engine", "https://kubernetes.default.svc.cluster.local", ""), 401, "token_invalid"},
		{check("n4", "secrets-engine", "", "expired-token"), 401, "token_invalid"},
		{check("n4-control", "secrets-engine", "", "resigned-token"), 200, ""},
	} {
		code, body := fromPod(ctx, t, callers, c.call)
		var got struct{ Reason string }
		_ = json.Unmarshal(body, &got)
		if code != c.code || got.Reason != c.reason {
			t.Errorf("pod %s (%s): %d %s; want %d %s", c.call.name, c.call.serviceAccount, code, body, c.code, c.reason)
		}
	}

	// The positive check, and its record verified against the JWKS the
	// pdp serves, by the CLI a consumer runs.
	code, body := fromPod(ctx, t, callers, check("positive", "secrets-engine", "flex-auth", ""))
	if code != 200 || !json.Valid(body) {
		t.Fatalf("the positive check: %d %s", code, body)
	}
	code, jwks := fromPod(ctx, t, callers, call{name: "jwks", serviceAccount: "default", method: "GET", url: base + "/.well-known/jwks.json", serverName: fqdn})
	if code != 200 {
		t.Fatalf("the pdp's JWKS: %d %s", code, jwks)
	}
	dir := t.TempDir()
	files := map[string][]byte{"jwks.json": jwks, "request.json": request, "response.json": body}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	err = cli.Execute(ctx, &cli.Options{Stdout: &out, Stderr: &out}, []string{"decision", "verify",
		"--jwks", filepath.Join(dir, "jwks.json"), "--request", filepath.Join(dir, "request.json"), filepath.Join(dir, "response.json")})
	if err != nil {
		t.Fatalf("callerauth decision verify: %v\n%s", err, out.String())
	}
	for _, want := range []string{`"effect": "allow"`, `"reason": "catalog_lane_policy_matched"`, `"policy_version": "v2"`, `"principal": "system:serviceaccount:secrets-engine:secrets-engine"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the verified record lacks %s:\n%s", want, out.String())
		}
	}
}

// pdpValues are the pdp chart's values for the secrets-engine example:
// its policy package and registry, the system bound to secrets-engine's
// account.
func pdpValues(t *testing.T) string {
	t.Helper()
	const example = "../../examples/secrets-engine"
	files := map[string]string{}
	entries, err := os.ReadDir(filepath.Join(example, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(example, "policy", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	registry, err := os.ReadFile(filepath.Join(example, "registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(map[string]any{
		"tls":        map[string]any{"secretName": "flex-auth-tls"},
		"signingKey": map[string]any{"secretName": "flex-auth-signing"},
		"policy":     map[string]any{"files": files},
		"registry":   map[string]any{"json": string(registry)},
		"caller":     map[string]any{"bindings": map[string]any{"secrets-engine": "system:serviceaccount:secrets-engine:secrets-engine"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pastExp is token with iat, nbf and exp moved back by ago, signed again
// with the cluster's service-account key (its kid kept): a token the API
// server would have issued that long ago.
func pastExp(t *testing.T, token string, ago time.Duration) string {
	t.Helper()
	claims := forge.Claims(token)
	for _, k := range []string{"iat", "nbf", "exp"} {
		claims[k] = claims[k].(float64) - ago.Seconds()
	}
	keyPEM, err := os.ReadFile(filepath.Join(node.API.Dir, "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return forge.Sign(claims, key.(crypto.Signer), jose.RS256, forge.KeyID(token))
}
