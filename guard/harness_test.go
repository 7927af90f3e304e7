package guard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/eventsvc"
	"github.com/callerauth/callerauth/internal/kit/scrape"
)

// The test service is eventsvc: Report takes a batch of node names and
// answers them as the handler stamped them.
const reportMethod = eventsvc.Method

var (
	eventsDesc   = eventsvc.Desc
	extractNodes = eventsvc.Extract
	nodesOf      = eventsvc.Nodes
	stringsList  = eventsvc.List
)

type eventsServer interface{}

// result is what a caller observes.
type result struct {
	code    string   // "OK", "Unauthenticated", "PermissionDenied", "Unavailable"
	reason  string   // the reason the refusal carried
	handler bool     // whether the handler ran
	nodes   []string // node names as the handler stamped them
}

// transport sends one batch with the given Authorization values.
type transport interface {
	send(t *testing.T, header []string, nodes []string) result
}

func newGuard(t testing.TB, cfg guard.Config) (*guard.Guard, *prometheus.Registry) {
	t.Helper()
	return newGuardPrefix(t, "platform_connector", cfg)
}

// newNodeGuard is newGuard with node binding as the rule, its counters
// on the guard's registry.
func newNodeGuard(t testing.TB, cfg guard.Config, nc binding.NodeConfig) (*guard.Guard, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	nm, err := binding.NewNodeMetrics(reg, "platform_connector")
	if err != nil {
		t.Fatal(err)
	}
	nc.Metrics = nm
	cfg.Rule = binding.NodeBinding(nc)
	return newGuardOn(t, reg, "platform_connector", cfg)
}

func newGuardPrefix(t testing.TB, prefix string, cfg guard.Config) (*guard.Guard, *prometheus.Registry) {
	t.Helper()
	return newGuardOn(t, prometheus.NewRegistry(), prefix, cfg)
}

func newGuardOn(t testing.TB, reg *prometheus.Registry, prefix string, cfg guard.Config) (*guard.Guard, *prometheus.Registry) {
	t.Helper()
	m, err := guard.NewMetrics(reg, guard.MetricsConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g, err := guard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, reg
}

// grpcTransport is a real gRPC server on loopback TCP with TLS, or on a
// Unix socket.
type grpcTransport struct {
	conn *grpc.ClientConn
}

func startGRPC(t *testing.T, g *guard.Guard, unix bool) *grpcTransport {
	t.Helper()
	var lis net.Listener
	var err error
	var sopts []grpc.ServerOption
	var copt grpc.DialOption
	target := ""
	if unix {
		sock := filepath.Join(t.TempDir(), "connector.sock")
		lis, err = net.Listen("unix", sock)
		target = "unix://" + sock
		copt = grpc.WithTransportCredentials(insecure.NewCredentials())
	} else {
		ca, _ := pki.NewCA("guard-test")
		tc, _ := ca.ServerTLS(pki.LoopbackHosts...)
		sopts = append(sopts, grpc.Creds(grpccreds.NewTLS(tc)))
		lis, err = net.Listen("tcp", "127.0.0.1:0")
		target = lis.Addr().String()
		copt = grpc.WithTransportCredentials(grpccreds.NewClientTLSFromCert(ca.Pool(), "localhost"))
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(sopts, grpc.ChainUnaryInterceptor(g.UnaryServerInterceptor(extractNodes)))...)
	srv.RegisterService(&eventsDesc, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(target, copt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &grpcTransport{conn: conn}
}

func (g *grpcTransport) send(t *testing.T, header []string, nodes []string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, h := range header {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", h)
	}
	out := new(structpb.ListValue)
	err := g.conn.Invoke(ctx, reportMethod, stringsList(nodes), out)
	if err != nil {
		st := status.Convert(err)
		r := result{code: st.Code().String(), reason: st.Message()}
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				if info.Reason != st.Message() || info.Domain != guard.ErrorDomain {
					t.Errorf("ErrorInfo %v does not carry the reason %q", info, st.Message())
				}
				return r
			}
		}
		t.Errorf("refusal %v carries no ErrorInfo", err)
		return r
	}
	return result{code: "OK", handler: true, nodes: nodesOf(out)}
}

// httpTransport is a real HTTPS server with the middleware.
type httpTransport struct {
	url    string
	client *http.Client
}

func startHTTP(t *testing.T, g *guard.Guard) *httpTransport {
	t.Helper()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := guard.FromContext(r.Context())
		if !ok {
			http.Error(w, "no verdict", http.StatusInternalServerError)
			return
		}
		var body struct{ Nodes []string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		_ = json.NewEncoder(w).Encode(map[string][]string{"nodes": binding.NodeGrantOf(v.Grant).Stamp(body.Nodes)})
	})
	extract := func(r *http.Request) (binding.Request, error) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return binding.Request{}, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		var body struct{ Nodes []string }
		if err := json.Unmarshal(b, &body); err != nil {
			return binding.Request{}, fmt.Errorf("body: %w", err)
		}
		return binding.NodesRequest(body.Nodes), nil
	}
	srv := httptest.NewTLSServer(g.Middleware(extract)(handler))
	t.Cleanup(srv.Close)
	return &httpTransport{url: srv.URL, client: srv.Client()}
}

var codeOfStatus = map[int]string{200: "OK", 401: "Unauthenticated", 403: "PermissionDenied", 503: "Unavailable"}

func (h *httpTransport) send(t *testing.T, header []string, nodes []string) result {
	t.Helper()
	body, _ := json.Marshal(map[string][]string{"nodes": nodes})
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/events", bytes.NewReader(body))
	for _, v := range header {
		req.Header.Add("Authorization", v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	code, ok := codeOfStatus[resp.StatusCode]
	if !ok {
		t.Fatalf("status %s", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Reason, Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode == http.StatusUnauthorized {
			// RFC 6750 §3.1: no error code for a request without
			// credentials.
			want := map[string]string{"token_missing": "Bearer", "malformed_credentials": `Bearer error="invalid_request"`}[e.Reason]
			if want == "" {
				want = `Bearer error="invalid_token"`
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != want {
				t.Errorf("401 %s: WWW-Authenticate %q, want %q", e.Reason, got, want)
			}
		}
		if e.Error != sentenceOf(t, e.Reason) {
			t.Errorf("body: error %q is not the sentence for %q", e.Error, e.Reason)
		}
		return result{code: code, reason: e.Reason}
	}
	var out struct{ Nodes []string }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return result{code: code, handler: true, nodes: out.Nodes}
}

// counters reads every guard series as "metric{label}" → value.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	v, err := scrape.Values(reg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func deltas(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// fakeAuth verifies the tokens the tables use: each names a caller or a
// validator failure. Built from authn.AuthenticatorFunc, not a mock.
func fakeAuth(callers map[string]*authn.Caller) authn.Layer {
	return authn.Layer{Authenticator: authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
		switch tok {
		case "invalid":
			return nil, authn.Fail(authn.TokenInvalid, "TokenReview: [invalid bearer token, service account token has expired]")
		case "unavailable":
			return nil, authn.Fail(authn.ValidatorUnavailable, "dial tcp 10.0.0.1:443: connect: connection refused")
		case "timeout":
			return nil, authn.Fail(authn.ValidatorTimeout, "context deadline exceeded")
		case "error":
			return nil, authn.Fail(authn.ValidatorError, "tokenreviews.authentication.k8s.io is forbidden")
		}
		if c, ok := callers[tok]; ok {
			return c, nil
		}
		return nil, authn.Fail(authn.TokenInvalid, "unknown test token")
	})}
}

func bearerOf(tok string) []string { return []string{"Bearer " + tok} }

// sentenceOf is the sentence of the reason with word w among every reason
// the guard and the library's rules can give.
func sentenceOf(t *testing.T, w string) string {
	t.Helper()
	all := binding.All(binding.NodeBinding(binding.NodeConfig{LocalNode: "n"}), binding.SystemBinding(nil), binding.Roles(binding.RoleConfig{}))
	for _, r := range append(binding.Reasons(all), guard.ReasonBadRequest) {
		if r.String() == w {
			return r.Sentence()
		}
	}
	t.Fatalf("no reason %q", w)
	return ""
}
