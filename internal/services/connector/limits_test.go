package connector_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/servicetest"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// running is a connector serving in the background.
type running struct {
	s    *connector.Server
	done chan error
	stop context.CancelFunc
	log  *capture.Buffer
}

// run starts a socket-role connector with node binding off (the limits
// come before authentication) unless config says otherwise.
func run(t *testing.T, edit func(*connector.Options), config string, auth authn.Authenticator) *running {
	t.Helper()
	dir := t.TempDir()
	if config == "" {
		config = `{"enableNodeBindingAuth": false}`
	}
	lb := &capture.Buffer{}
	o := options(t, config)
	o.Datastore, o.Serve.LogOutput = filepath.Join(dir, "events.db"), lb
	edit(&o)
	s := newServer(t, o, auth)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, done: make(chan error, 1), stop: cancel, log: lb}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	// Serving once the start-up line is out: a stale socket file at the
	// path exists before the connector listens on it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(lb.String(), "connector: serving"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the connector did not start:\n%s", lb.String())
		}
	}
	return r
}

func dialSocket(t *testing.T, path string) pcv1.PlatformConnectorClient {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket at %s", path)
		}
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pcv1.NewPlatformConnectorClient(conn)
}

func events(n int, message string) *pcv1.HealthEvents {
	b := &pcv1.HealthEvents{}
	for range n {
		b.Events = append(b.Events, &pcv1.HealthEvent{NodeName: "node-a", CheckName: "c", Message: message})
	}
	return b
}

// TestBatchLimits: one call carried 100,000 rows before; now a batch over
// either limit is refused whole, says which limit, stores nothing and is
// counted.
func TestBatchLimits(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pc.sock")
	r := run(t, func(o *connector.Options) { o.Socket, o.MaxBatchEvents, o.MaxMessageBytes = sock, 10, 64<<10 }, "", nil)
	c := dialSocket(t, sock)
	ctx := context.Background()
	refused := func(limit string) float64 { return counter(t, r.s, "platform_connector_batches_refused_total", limit) }
	_, err := c.HealthEventOccurredV1(ctx, events(11, ""))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a batch of 11 events is over the limit of 10 (--max-batch-events)") {
		t.Fatalf("11 events: %v", err)
	}
	_, err = c.HealthEventOccurredV1(ctx, events(2, strings.Repeat("m", 40<<10)))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("an 80 KiB message: %v", err)
	}
	if got, _ := r.s.Store().List(ctx, "", 0); len(got) != 0 {
		t.Fatalf("%d events stored from refused batches", len(got))
	}
	if refused("events") != 1 || refused("bytes") != 1 {
		t.Fatalf("refusals counted: events %v, bytes %v", refused("events"), refused("bytes"))
	}
	if _, err := c.HealthEventOccurredV1(ctx, events(10, "")); err != nil {
		t.Fatalf("a batch at the limit: %v", err)
	}
	if got, _ := r.s.Store().List(ctx, "", 0); len(got) != 10 {
		t.Fatalf("%d events stored; want 10", len(got))
	}
}

// counter reads one labelled counter from the connector's registry.
func counter(t *testing.T, s *connector.Server, name, label string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// options are the connector's defaults in the socket role on node-a,
// with config as config.json and metrics off.
func options(t testing.TB, config string) connector.Options {
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	o := connector.NewOptions("node-a")
	o.ConfigFile, o.Serve.MetricsListen, o.Serve.LogOutput = cfg, "", io.Discard
	return o
}

// newServer completes o and builds the connector, verifying callers with
// auth (behind the stack's cache) instead of o's backend when auth is set.
func newServer(t testing.TB, o connector.Options, auth authn.Authenticator) *connector.Server {
	t.Helper()
	return servicetest.New(t, o, func(c *connector.Config) {
		if auth != nil {
			c.Callers = callers.Custom(auth, "TokenReview")
		}
	}, connector.New)
}

// TestSocketPathIsNotTakenOver: only a stale socket is removed. A regular
// file at the path is refused and kept; a socket another connector is
// serving on is refused, and that connector keeps serving its publishers.
func TestSocketPathIsNotTakenOver(t *testing.T) {
	dir := t.TempDir()
	newServer := func(sock string) *connector.Server {
		o := options(t, `{"enableNodeBindingAuth": false}`)
		o.Socket, o.Datastore = sock, filepath.Join(t.TempDir(), "db")
		return newServer(t, o, nil)
	}
	t.Run("a regular file", func(t *testing.T) {
		path := filepath.Join(dir, "file.sock")
		_ = os.WriteFile(path, []byte("precious"), 0o600)
		err := newServer(path).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "exists and is not a socket") || !strings.Contains(err.Error(), path) {
			t.Fatalf("Run = %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "precious" {
			t.Fatal("the file was removed")
		}
	})
	t.Run("a live socket", func(t *testing.T) {
		path := filepath.Join(dir, "live.sock")
		first := run(t, func(o *connector.Options) { o.Socket = path }, "", nil)
		c := dialSocket(t, path)
		err := newServer(path).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "another process is listening on it") {
			t.Fatalf("Run = %v", err)
		}
		if _, err := c.HealthEventOccurredV1(context.Background(), events(1, "")); err != nil {
			t.Fatalf("the first connector lost its socket: %v", err)
		}
		if got, _ := first.s.Store().List(context.Background(), "", 0); len(got) != 1 {
			t.Fatalf("the first connector stored %d events", len(got))
		}
	})
	t.Run("a stale socket", func(t *testing.T) {
		path := filepath.Join(dir, "stale.sock")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false) // a connector that died leaves this behind
		_ = l.Close()
		run(t, func(o *connector.Options) { o.Socket = path }, "", nil)
		if _, err := dialSocket(t, path).HealthEventOccurredV1(context.Background(), events(1, "")); err != nil {
			t.Fatalf("after a stale socket: %v", err)
		}
	})
}

// TestDeploymentRoleLogsEffectiveSettings: config.json may say audit and
// fail-open, but the deployment role enforces; the start-up line says what
// is in force.
func TestDeploymentRoleLogsEffectiveSettings(t *testing.T) {
	ca, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(cert, certPEM, 0o600)
	_ = os.WriteFile(key, keyPEM, 0o600)
	r := run(t, func(o *connector.Options) {
		o.Role, o.NodeName, o.Serve.Listen, o.Serve.TLSCertFile, o.Serve.TLSKeyFile = connector.RoleDeployment, "", "127.0.0.1:0", cert, key
	}, `{"enableNodeBindingAuth": true, "AuthAudience": "pc", "AuthCrossNodeServiceAccounts": [], "AuthMode": "audit", "AuthFailOpenOnUnavailable": true}`,
		authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) {
			return nil, authn.Fail(authn.TokenInvalid, "test")
		}))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(r.log.String(), "connector: serving"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no start-up line: %s", r.log.String())
		}
	}
	for _, line := range strings.Split(r.log.String(), "\n") {
		if strings.Contains(line, "connector: serving") && (!strings.Contains(line, `"mode":"enforce"`) || !strings.Contains(line, `"failOpenOnUnavailable":false`)) {
			t.Fatalf("the start-up line does not say what is in force: %s", line)
		}
	}
}

// TestMetricsTheDocsList: every series docs/platform-connector.md lists is
// exported from start-up, and every reason of its table is a label value
// of the violations counter, at zero.
func TestMetricsTheDocsList(t *testing.T) {
	b, err := os.ReadFile("../../../docs/platform-connector.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	section := doc[strings.Index(doc, "## Metrics"):]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	sock := filepath.Join(t.TempDir(), "pc.sock")
	r := run(t, func(o *connector.Options) { o.Socket = sock }, `{"enableNodeBindingAuth": true, "AuthAudience": "pc", "AuthCrossNodeServiceAccounts": []}`,
		authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) {
			return nil, authn.Fail(authn.TokenInvalid, "test")
		}))
	mfs, err := r.s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]bool{}
	for _, mf := range mfs {
		labels[mf.GetName()] = map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[mf.GetName()][l.GetValue()] = true
			}
		}
	}
	metrics, reasons := 0, 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		first := strings.TrimSpace(cells[1])
		switch {
		case strings.HasPrefix(first, "`platform_connector_"):
			metrics++
			if labels[strings.Trim(first, "`")] == nil {
				t.Errorf("docs list %s; the connector does not export it", first)
			}
		case strings.HasPrefix(first, "`") && !strings.Contains(first, " "):
			reasons++
			if !labels["platform_connector_auth_violations_total"][strings.Trim(first, "`")] {
				t.Errorf("docs list reason %s; the violations counter has no such label value", first)
			}
		}
	}
	if metrics < 4 || reasons < 10 {
		t.Fatalf("read %d metrics and %d reasons from the docs; the table moved?", metrics, reasons)
	}
}

// TestIdempotencyKeyCheckedOnEveryBatch: a key no batch may carry is
// refused with its reason even on an empty batch (before, an empty batch
// was answered OK without its key being looked at).
func TestIdempotencyKeyCheckedOnEveryBatch(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pc.sock")
	run(t, func(o *connector.Options) { o.Socket = sock }, "", nil)
	c := dialSocket(t, sock)
	for _, batch := range []*pcv1.HealthEvents{{IdempotencyKey: "bad key!"}, {IdempotencyKey: strings.Repeat("k", connector.MaxIdempotencyKey+1)}} {
		_, err := c.HealthEventOccurredV1(context.Background(), batch)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "idempotency_key") {
			t.Errorf("an empty batch with key %.20q: %v; want InvalidArgument naming idempotency_key", batch.IdempotencyKey, err)
		}
	}
	if _, err := c.HealthEventOccurredV1(context.Background(), &pcv1.HealthEvents{IdempotencyKey: "ok-key"}); err != nil {
		t.Fatalf("an empty batch with a good key: %v", err)
	}
}

// TestPublisherQuotaAndDatastoreBound: a caller past its events for the
// window is refused ResourceExhausted publisher_quota with the delay to
// retry after, and a batch that fits is still stored; a datastore past
// --max-datastore-bytes refuses new batches (datastore_full) rather than
// fill the disk; both counted.
func TestPublisherQuotaAndDatastoreBound(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pc.sock")
	r := run(t, func(o *connector.Options) {
		o.Socket, o.QuotaEvents, o.QuotaWindow, o.MaxDatastoreBytes = sock, 5, time.Hour, 1<<20
	}, "", nil)
	c := dialSocket(t, sock)
	ctx := context.Background()
	if _, err := c.HealthEventOccurredV1(ctx, events(3, "")); err != nil {
		t.Fatal(err)
	}
	_, err := c.HealthEventOccurredV1(ctx, events(3, ""))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "retry in") {
		t.Fatalf("3 more events of a quota of 5: %v; want ResourceExhausted with a delay", err)
	}
	if _, err := c.HealthEventOccurredV1(ctx, events(2, "")); err != nil {
		t.Fatalf("2 more, within the quota: %v", err)
	}
	if got := counter(t, r.s, "platform_connector_quota_refusals_total", connector.ReasonPublisherQuota.String()); got != 1 {
		t.Fatalf("publisher_quota refusals counted: %v", got)
	}

	// Another connector, a generous quota and a 1 MiB bound: batches of
	// 8 × 32 KiB until the bound refuses them.
	sock2 := filepath.Join(t.TempDir(), "pc2.sock")
	r2 := run(t, func(o *connector.Options) {
		o.Socket, o.QuotaEvents, o.MaxDatastoreBytes, o.MaxPublisherBytes = sock2, 1<<20, 1<<20, 1<<20
	}, "", nil)
	c2 := dialSocket(t, sock2)
	refused := false
	for deadline := time.Now().Add(30 * time.Second); !refused && time.Now().Before(deadline); {
		_, err := c2.HealthEventOccurredV1(ctx, events(8, strings.Repeat("m", 32<<10)))
		switch {
		case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "--max-datastore-bytes"):
			refused = true
		case err != nil:
			t.Fatal(err)
		default:
			time.Sleep(50 * time.Millisecond) // the size is looked at every 2 s
		}
	}
	if !refused {
		t.Fatal("the datastore was never bounded")
	}
	size, err := r2.s.Store().Size(ctx)
	if err != nil || size > 4<<20 {
		t.Fatalf("the datastore holds %d bytes with a 1 MiB bound, %v; want it stopped near the bound", size, err)
	}
	if got := counter(t, r2.s, "platform_connector_quota_refusals_total", connector.ReasonDatastoreFull.String()); got < 1 {
		t.Fatalf("datastore_full refusals counted: %v", got)
	}
}

// TestPublisherShare: one publisher that stores as much as it can fills
// its share of the datastore (--max-publisher-bytes) and is refused
// publisher_share_full; another publisher's batches are still stored.
func TestPublisherShare(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pc.sock")
	pods := map[string]*authn.Caller{
		"a": {Username: "system:serviceaccount:nvsentinel:mon", PodName: "mon-a", PodUID: "uid-a", NodeName: "node-a"},
		"b": {Username: "system:serviceaccount:nvsentinel:mon", PodName: "mon-b", PodUID: "uid-b", NodeName: "node-a"},
	}
	r := run(t, func(o *connector.Options) {
		o.Socket, o.QuotaEvents, o.MaxDatastoreBytes, o.MaxPublisherBytes = sock, 1<<20, 64<<20, 256<<10
	}, `{"enableNodeBindingAuth": true, "AuthAudience": "pc", "AuthCrossNodeServiceAccounts": []}`,
		authn.AuthenticatorFunc(func(_ context.Context, tok string) (*authn.Caller, error) {
			if c, ok := pods[tok]; ok {
				return c, nil
			}
			return nil, authn.Fail(authn.TokenInvalid, "test")
		}))
	c := dialSocket(t, sock)
	as := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		_, err := c.HealthEventOccurredV1(as("a"), events(8, strings.Repeat("m", 16<<10)))
		switch {
		case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "--max-publisher-bytes"):
			refused = true
		case err != nil:
			t.Fatal(err)
		}
	}
	if !refused {
		t.Fatal("publisher a was never held to its share")
	}
	if _, err := c.HealthEventOccurredV1(as("b"), events(8, strings.Repeat("m", 16<<10))); err != nil {
		t.Fatalf("publisher b, with a over its share: %v; want it stored", err)
	}
	if got := counter(t, r.s, "platform_connector_quota_refusals_total", connector.ReasonPublisherShareFull.String()); got != 1 {
		t.Fatalf("publisher_share_full refusals counted: %v, want 1", got)
	}
	if got := counter(t, r.s, "platform_connector_quota_refusals_total", connector.ReasonDatastoreFull.String()); got != 0 {
		t.Fatalf("datastore_full refusals: %v, want none", got)
	}
	// The share is held within a batch: what a stored is its share and
	// at most one batch more.
	stored, err := r.s.Store().PublisherBytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a := stored["pod:uid-a"]; a < 256<<10 || a > 256<<10+8*(16<<10+512) {
		t.Errorf("publisher a holds %d bytes with a share of %d", a, 256<<10)
	}
}

// TestSocketPathBound: a --socket longer than a Unix socket's path may be
// (107 bytes) stops the connector at start-up naming both lengths and the
// chart value, rather than failing readiness with "bind: invalid
// argument" (a long daemonset.socketDir; test/cluster's nodes found it).
func TestSocketPathBound(t *testing.T) {
	o := options(t, `{"enableNodeBindingAuth": false}`)
	o.Datastore = filepath.Join(t.TempDir(), "events.db")
	for _, c := range []struct {
		socket string
		ok     bool
	}{
		{"/" + strings.Repeat("d", 106-len("/platform-connector.sock")) + "/platform-connector.sock", true},
		{"/" + strings.Repeat("d", 107-len("/platform-connector.sock")) + "/platform-connector.sock", false},
	} {
		o.Socket = c.socket
		_, err := o.Complete()
		bad := err != nil && strings.Contains(err.Error(), fmt.Sprintf("is %d bytes: a Unix socket's path is at most 107 (daemonset.socketDir at most 83)", len(c.socket)))
		if bad == c.ok || (c.ok && err != nil) {
			t.Errorf("--socket of %d bytes: %v", len(c.socket), err)
		}
	}
}
