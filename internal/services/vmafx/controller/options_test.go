package controller_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/tenantconf"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
)

// TestReviewTimeoutApplies: --caller-review-timeout bounds the fetch of a
// tenant issuer's discovery document. Against an issuer that never
// answers, a call with a 5 s deadline is refused by the controller
// (validator_timeout or validator_unavailable, from the 300 ms bound)
// rather than running into the client's deadline — as it did when the
// controller built its verifier beside the shared options and the flag
// did nothing (the verifier's own 5 s default then outlasted... nothing
// shorter than the client's).
func TestReviewTimeoutApplies(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("hanging idp")
	if err != nil {
		t.Fatal(err)
	}
	hang := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	if hang.TLS, err = ca.ServerTLS("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	hang.StartTLS()
	defer hang.Close()
	caFile, err := ca.WriteCA(filepath.Join(dir, "idp-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	o := controller.NewOptions()
	o.Datastore = filepath.Join(dir, "jobs.db")
	o.Callers.AuthenticationConfig = tenantconf.Write(t, filepath.Join(dir, "authentication-config.yaml"),
		tenantconf.Tenant{Name: "tenant-a", Issuer: "https://idp.tenant-a.example", DiscoveryURL: hang.URL, CAFile: caFile})
	o.Callers.ReviewTimeout = 300 * time.Millisecond
	e := startWith(t, dir, o)
	iss, err := devissuer.Open(t.TempDir(), devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: "ci", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"scp": "vmafx:reader"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = e.clientWith(t, tok.Token).ListJobs(ctx, &vmafxv1.ListJobsRequest{})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.HasPrefix(st.Message(), "validator_") {
		t.Fatalf("with an issuer that never answers and --caller-review-timeout 300ms: %s %s; want Unavailable validator_timeout or validator_unavailable", st.Code(), st.Message())
	}
}

// TestCallerAuthValidated: the controller validates the shared
// caller-authentication settings (it did not), and refuses a backend or an
// issuers file that are not its own.
func TestCallerAuthValidated(t *testing.T) {
	base := controller.NewOptions()
	base.Serve.Listen, base.Serve.TLSCertFile, base.Serve.TLSKeyFile = "127.0.0.1:0", "c", "k"
	base.Callers.AuthenticationConfig, base.Datastore = "authn.yaml", "jobs.db"
	for _, c := range []struct {
		set  func(*controller.Options)
		want string
	}{
		{func(o *controller.Options) { o.Callers.KeysMaxStale = -time.Second }, "--caller-keys-max-stale -1s"},
		{func(o *controller.Options) { o.Callers.MaxInFlight = -1 }, "--caller-max-in-flight -1"},
		{func(o *controller.Options) { o.Callers.CacheTTL = -time.Second }, "--caller-cache-ttl -1s"},
		{func(o *controller.Options) { o.MaxPendingJobs = 0 }, "--max-pending-jobs 0"},
		{func(o *controller.Options) { o.Callers.Backend = callers.BackendTokenReview }, "--caller-backend tokenreview: the controller verifies each tenant's identity provider offline"},
		{func(o *controller.Options) { o.Callers.Kubeconfig = "kc" }, "--kubeconfig belongs to --caller-backend tokenreview"},
		{func(o *controller.Options) { o.Callers.AuthenticationConfig = "" }, "--caller-authentication-config is required"},
	} {
		o := base
		c.set(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v; want an error naming %q", err, c.want)
		}
	}
	if err := base.Validate(); err != nil {
		t.Fatalf("the base options: %v", err)
	}
}

// TestCheckTenantPerIssuer: under an AuthenticationConfiguration the
// issuer still decides the tenant: each maps callerauth.dev/tenant to a
// constant of its own.
func TestCheckTenantPerIssuer(t *testing.T) {
	issuer := func(url, extra string) string {
		return "- issuer: {url: " + url + ", audiences: [vmafx-controller]}\n  claimMappings:\n    username: {expression: claims.sub}\n" + extra
	}
	tenant := func(expr string) string {
		return "    extra:\n    - key: callerauth.dev/tenant\n      valueExpression: '" + expr + "'\n"
	}
	for name, c := range map[string]struct{ jwt, want string }{
		"one each":          {issuer("https://a.example", tenant(`"tenant-a"`)) + issuer("https://b.example", tenant(`"tenant-b"`)), ""},
		"no tenant mapping": {issuer("https://a.example", ""), "needs key callerauth.dev/tenant with a constant valueExpression"},
		"read from a claim": {issuer("https://a.example", tenant("claims.tenant")), "needs key callerauth.dev/tenant with a constant valueExpression"},
		"not a DNS label":   {issuer("https://a.example", tenant(`"Tenant_A"`)), `tenant "Tenant_A": want a DNS label`},
		"two issuers, one tenant": {issuer("https://a.example", tenant(`"tenant-a"`)) + issuer("https://b.example", tenant(`"tenant-a"`)),
			`tenant "tenant-a" is already the tenant of https://a.example`},
	} {
		cfg, err := authconfig.Parse([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n" + c.jwt))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = controller.CheckTenantPerIssuer(cfg)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}

// TestTenantsFlagRemoved: --tenants stops the controller saying what to do
// instead (the file's issuers as an AuthenticationConfiguration, which
// callerauth config convert writes).
func TestTenantsFlagRemoved(t *testing.T) {
	cmd := controller.NewCommand(io.Discard)
	err := cmd.ParseFlags([]string{"--tenants", "tenants.yaml"})
	if err == nil || !strings.Contains(err.Error(), "--tenants (the YAML tenants file) was removed: callerauth config convert FILE") {
		t.Fatalf("--tenants: %v", err)
	}
}
