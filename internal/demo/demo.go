// Package demo runs callerauth's behaviours end to end on loopback, with the
// embedded dev issuer and real TLS servers, and reports each as a row of
// scenario / expected / observed / verdict. It backs `callerauth demo`.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/recorder"
	"github.com/callerauth/callerauth/internal/kit/tokenvolume"
	"github.com/callerauth/callerauth/token"
)

// Result is one scenario's outcome.
type Result struct {
	Scenario string
	Expected string
	Observed string
	Pass     bool
}

// env is what the scenarios share: the issuer, a TLS gRPC server and a TLS
// HTTP server that record the tokens they receive, and a kubelet-style token
// volume the client reads.
type env struct {
	dir    string
	iss    *devissuer.Issuer
	caFile string
	grpc   *recorder.Recorder
	addr   string
	http   *recorder.Recorder
	url    string
	vol    *tokenvolume.Volume
	issURL string
}

// Run starts everything in-process on loopback under a temporary directory,
// runs every scenario, and returns the results in order. It returns an error
// only when the environment could not be set up.
func Run(ctx context.Context) ([]Result, error) {
	dir, err := os.MkdirTemp("", "callerauth-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	e, stop, err := setUp(dir)
	if err != nil {
		return nil, err
	}
	defer stop()

	scenarios := []func(context.Context, *env) Result{
		rotation,
		expiredRefused,
		nonJWTSent,
		plaintextRefused,
		httpSameBehaviour,
		verifyTokenReview,
		verifyOffline,
		refuseExpired,
		refuseWrongAudience,
		refuseDeletedPod,
		reviewOncePerInterval,
		refuseMalformed,
		validatorUnavailable,
		validatorTimeout,
		validatorForbidden,
	}
	scenarios = append(scenarios, nodeScenarios...)
	scenarios = append(scenarios, connectorSocket, connectorRevocation, connectorDeployment, connectorConfigRefused)
	scenarios = append(scenarios, pdpScenarios...)
	scenarios = append(scenarios, vmafxScenarios...)
	scenarios = append(scenarios, proxyRBAC)
	results := make([]Result, 0, len(scenarios))
	for _, s := range scenarios {
		results = append(results, s(ctx, e))
	}
	return results, nil
}

func setUp(dir string) (*env, func(), error) {
	iss, err := devissuer.Open(filepath.Join(dir, "issuer"), devissuer.Config{})
	if err != nil {
		return nil, nil, err
	}
	issSrv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		return nil, nil, err
	}
	ca, err := pki.NewCA("callerauth demo CA")
	if err != nil {
		return nil, nil, err
	}
	caFile, err := ca.WriteCA(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, nil, err
	}
	tc, err := ca.ServerTLS(pki.LoopbackHosts...)
	if err != nil {
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	grec := &recorder.Recorder{}
	gsrv := grec.NewGRPCServer(grpc.Creds(grpccreds.NewTLS(tc)))
	go func() { _ = gsrv.Serve(lis) }()

	hrec := &recorder.Recorder{}
	hsrv := httptest.NewUnstartedServer(hrec)
	hsrv.TLS = tc
	hsrv.StartTLS()

	vol, err := tokenvolume.New(filepath.Join(dir, "token-volume"))
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		gsrv.Stop()
		hsrv.Close()
		_ = issSrv.Close()
	}
	return &env{dir: dir, iss: iss, caFile: caFile, grpc: grec, addr: lis.Addr().String(), http: hrec, url: hsrv.URL, vol: vol, issURL: issSrv.URL}, stop, nil
}

// mint returns a token for the demo operator's service account.
func (e *env) mint(issuedAt time.Time) (devissuer.Token, error) {
	return e.iss.Mint(devissuer.TokenRequest{
		Namespace: "vmafx", ServiceAccount: "vmafx-operator",
		Audiences: []string{"vmafx-controller"}, Lifetime: 10 * time.Minute, IssuedAt: issuedAt,
	})
}

func (e *env) client() (healthpb.HealthClient, func(), error) {
	cfg := credentials.Config{Address: e.addr, TLS: true, CAFile: e.caFile, ServerName: "localhost", TokenFile: e.vol.Path()}
	conn, err := cfg.Dial()
	if err != nil {
		return nil, nil, err
	}
	return healthpb.NewHealthClient(conn), func() { _ = conn.Close() }, nil
}

func call(ctx context.Context, c healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// who reviews a recorded token with the issuer, as the server would.
func (e *env) who(tok string) string {
	st := e.iss.Review(tok, []string{"vmafx-controller"})
	if !st.Authenticated {
		return "unauthenticated"
	}
	return strings.TrimPrefix(st.User.Username, "system:serviceaccount:") + " " + st.User.Extra[authn.ExtraCredentialID][0]
}

func fail(r Result, err error) Result {
	r.Observed = "error: " + err.Error()
	return r
}

func rotation(ctx context.Context, e *env) Result {
	r := Result{
		Scenario: "token file rotated under a running gRPC client",
		Expected: "next call carries the new token, no restart",
	}
	first, err := e.mint(time.Time{})
	if err != nil {
		return fail(r, err)
	}
	second, err := e.mint(time.Time{})
	if err != nil {
		return fail(r, err)
	}
	if err := e.vol.Publish(first.Token); err != nil {
		return fail(r, err)
	}
	c, closeConn, err := e.client()
	if err != nil {
		return fail(r, err)
	}
	defer closeConn()
	if err := call(ctx, c); err != nil {
		return fail(r, err)
	}
	got1, _ := e.grpc.Last()
	if err := e.vol.Publish(second.Token); err != nil {
		return fail(r, err)
	}
	if err := call(ctx, c); err != nil {
		return fail(r, err)
	}
	got2, _ := e.grpc.Last()
	r.Observed = fmt.Sprintf("call 1: %s; after ..data swap: %s", short(e.who(got1)), short(e.who(got2)))
	r.Pass = got1 == first.Token && got2 == second.Token
	return r
}

func expiredRefused(ctx context.Context, e *env) Result {
	r := Result{
		Scenario: "expired JWT in the token file",
		Expected: "refused in-process, error names file and expiry; server sees nothing",
	}
	stale, err := e.mint(time.Now().Add(-time.Hour))
	if err != nil {
		return fail(r, err)
	}
	if err := e.vol.Publish(stale.Token); err != nil {
		return fail(r, err)
	}
	c, closeConn, err := e.client()
	if err != nil {
		return fail(r, err)
	}
	defer closeConn()
	before := e.grpc.Len()
	err = call(ctx, c)
	sent := e.grpc.Len() - before
	exp := stale.Claims.Expiry.Time().UTC().Format(time.RFC3339)
	if err == nil {
		r.Observed = "call succeeded"
		return r
	}
	namesFile := strings.Contains(err.Error(), e.vol.Path())
	namesExp := strings.Contains(err.Error(), exp)
	r.Observed = fmt.Sprintf("refused; names file: %t, expiry %s: %t; calls sent: %d", namesFile, exp, namesExp, sent)
	r.Pass = namesFile && namesExp && sent == 0
	return r
}

func nonJWTSent(ctx context.Context, e *env) Result {
	r := Result{
		Scenario: "token file holds a non-JWT token",
		Expected: "sent as is",
	}
	const opaque = "opaque-dev-token-0001"
	if err := e.vol.Publish(opaque); err != nil {
		return fail(r, err)
	}
	c, closeConn, err := e.client()
	if err != nil {
		return fail(r, err)
	}
	defer closeConn()
	if err := call(ctx, c); err != nil {
		return fail(r, err)
	}
	got, _ := e.grpc.Last()
	r.Observed = fmt.Sprintf("server received %q", got)
	r.Pass = got == opaque
	return r
}

func plaintextRefused(_ context.Context, e *env) Result {
	r := Result{
		Scenario: "bearer token configured for plaintext TCP",
		Expected: "Validate refuses at start-up, naming the keys",
	}
	cfg, err := credentials.Load("controller", credentials.FromEnv("VMAFX_CONTROLLER_"), credentials.WithLookupEnv(func(k string) (string, bool) {
		v, ok := map[string]string{
			"VMAFX_CONTROLLER_ADDRESS":    e.addr,
			"VMAFX_CONTROLLER_TOKEN_FILE": e.vol.Path(),
		}[k]
		return v, ok
	}))
	if err != nil {
		return fail(r, err)
	}
	err = cfg.Validate()
	if err == nil {
		r.Observed = "accepted"
		return r
	}
	r.Observed = "refused: " + strings.TrimPrefix(strings.SplitN(err.Error(), " sends", 2)[0], "credentials: ") + " needs TLS"
	r.Pass = strings.Contains(err.Error(), "VMAFX_CONTROLLER_TOKEN_FILE") && strings.Contains(err.Error(), "VMAFX_CONTROLLER_TLS")
	return r
}

func httpSameBehaviour(ctx context.Context, e *env) Result {
	r := Result{
		Scenario: "HTTP client with the same credentials",
		Expected: "fresh token sent; expired one refused (*token.ExpiredError)",
	}
	rt, err := credentials.Config{TLS: true, CAFile: e.caFile, TokenFile: e.vol.Path()}.Transport()
	if err != nil {
		return fail(r, err)
	}
	client := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	get := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	fresh, err := e.mint(time.Time{})
	if err != nil {
		return fail(r, err)
	}
	stale, err := e.mint(time.Now().Add(-time.Hour))
	if err != nil {
		return fail(r, err)
	}
	if err := e.vol.Publish(fresh.Token); err != nil {
		return fail(r, err)
	}
	if err := get(); err != nil {
		return fail(r, err)
	}
	got, _ := e.http.Last()
	if err := e.vol.Publish(stale.Token); err != nil {
		return fail(r, err)
	}
	before := e.http.Len()
	err = get()
	var expired *token.ExpiredError
	refused := errors.As(err, &expired) && e.http.Len() == before
	r.Observed = fmt.Sprintf("sent: %s; expired refused in-process: %t", short(e.who(got)), refused)
	r.Pass = got == fresh.Token && refused
	return r
}

// short trims the credential id to keep the table narrow.
func short(s string) string {
	if i := strings.Index(s, "JTI="); i >= 0 && len(s) > i+12 {
		return s[:i+12] + "…"
	}
	return s
}

// Print writes the results as a table and a closing line with the counts.
func Print(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tEXPECTED\tOBSERVED\tVERDICT")
	passed := 0
	for _, r := range results {
		v := "FAIL"
		if r.Pass {
			v, passed = "pass", passed+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Scenario, r.Expected, r.Observed, v)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\ndemo: %d passed, %d failed\n", passed, len(results)-passed)
}

// AllPassed reports whether every result passed.
func AllPassed(results []Result) bool {
	for _, r := range results {
		if !r.Pass {
			return false
		}
	}
	return len(results) > 0
}
