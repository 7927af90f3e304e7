package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// The platform-connector itself, in-process: its config loader, its store,
// both roles, against the dev issuer through TokenReview.

const connectorConfig = `{"enableNodeBindingAuth": true, "AuthAudience": "platform-connector",
	"AuthCrossNodeServiceAccounts": ["system:serviceaccount:nvsentinel:csp-health-monitor"]}`

// runConnector starts a connector and returns it with its stop function.
func (e *env) runConnector(name string, o connector.Options) (*connector.Server, func(), error) {
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	o.ConfigFile = filepath.Join(dir, "config.json")
	if err := os.WriteFile(o.ConfigFile, []byte(connectorConfig), 0o600); err != nil {
		return nil, nil, err
	}
	o.Datastore, o.Serve.MetricsListen, o.Serve.LogOutput = filepath.Join(dir, "events.db"), "", io.Discard
	o.Callers.Kubeconfig = e.iss.KubeconfigFile()
	c, err := o.Complete()
	if err != nil {
		return nil, nil, err
	}
	s, err := connector.New(c)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	return s, func() { cancel(); <-done }, nil
}

func waitFor(path string) error {
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s never appeared", path)
}

func (e *env) tokenFile(name string, req devissuer.TokenRequest) (string, error) {
	tok, err := e.iss.Mint(req)
	if err != nil {
		return "", err
	}
	p := filepath.Join(e.dir, name+".token")
	return p, os.WriteFile(p, []byte(tok.Token), 0o600)
}

// socketPublisher runs a socket-role connector for node-a (set changes its
// options) and a publisher on it whose token is bound to pod on node-a;
// stop stops both.
func (e *env) socketPublisher(name, pod string, set func(*connector.Options)) (*connector.Server, *connector.Publisher, func(), error) {
	sock := filepath.Join(e.dir, "pc-"+name+".sock")
	o := connector.NewOptions(connectorNode)
	o.Socket = sock
	if set != nil {
		set(&o)
	}
	s, stop, err := e.runConnector(name, o)
	if err != nil {
		return nil, nil, nil, err
	}
	tf, err := e.tokenFile(pod, devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-health-monitor", Audiences: []string{connectorAud}, Pod: pod, Node: connectorNode})
	if err == nil {
		err = waitFor(sock)
	}
	var pub *connector.Publisher
	if err == nil {
		pub, err = connector.NewPublisher(credentials.Config{Address: "unix://" + sock, TokenFile: tf})
	}
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return s, pub, func() { _ = pub.Close(); stop() }, nil
}

func connectorSocket(ctx context.Context, e *env) Result {
	r := Result{Scenario: "connector (socket): pod-bound publisher, blank node", Expected: "stored about node-a, caller named"}
	s, pub, stop, err := e.socketPublisher("socket", "gpu-mon-socket", nil)
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	if err := pub.Publish(ctx, &pcv1.HealthEvent{CheckName: "GpuXid", Message: "xid 79"}); err != nil {
		return fail(r, err)
	}
	stored, err := s.Store().List(ctx, "", 0)
	if err != nil || len(stored) != 1 {
		return fail(r, fmt.Errorf("stored %d events: %w", len(stored), err))
	}
	r.Observed = fmt.Sprintf("stored: node=%s caller=%s scope=%s", stored[0].Node, strings.TrimPrefix(stored[0].Caller, "system:serviceaccount:"), stored[0].Scope)
	r.Pass = stored[0].Node == connectorNode && stored[0].Caller == "system:serviceaccount:nvsentinel:gpu-health-monitor"
	return r
}

// connectorRevocation runs the socket role as its chart does, with
// --caller-watch-bound-objects: tokens verified offline, the publisher's
// pod checked in a watch of node-a's pods. The publisher's token costs no
// TokenReview; once its pod is deleted, the next event is refused.
func connectorRevocation(ctx context.Context, e *env) Result {
	r := Result{Scenario: "connector (socket): a deleted pod's token, bound objects watched", Expected: "refused within 5 s, 0 TokenReviews"}
	s, pub, stop, err := e.socketPublisher("watch", "gpu-mon-watched", func(o *connector.Options) {
		o.Callers.Issuers, o.Callers.WatchBoundObjects = []string{e.iss.Issuer()}, true
	})
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	publish := func() error { return pub.Publish(ctx, &pcv1.HealthEvent{CheckName: "GpuXid", Message: "xid 79"}) }
	// Until the view has listed node-a's pods, this one among them, a token
	// would be reviewed (and its verdict cached): wait for it.
	pods, err := e.iss.Pods()
	if err != nil {
		return fail(r, err)
	}
	onNode := 0
	for _, node := range pods {
		if node == connectorNode {
			onNode++
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m := gather(s.Registry())
		if m["platform_connector_caller_bound_synced"] == 1 && m["platform_connector_caller_bound_objects{pods}"] == float64(onNode) {
			break
		}
		if time.Now().After(deadline) {
			return fail(r, fmt.Errorf("the bound-object view did not hold node-a's %d pods within 10 s: %v", onNode, m["platform_connector_caller_bound_objects{pods}"]))
		}
	}
	before := e.iss.Reviews()
	for range 10 {
		if err := publish(); err != nil {
			return fail(r, err)
		}
	}
	if err := e.iss.DeletePod("nvsentinel", "gpu-mon-watched"); err != nil {
		return fail(r, err)
	}
	deleted := time.Now()
	var refused error
	for time.Since(deleted) < 5*time.Second {
		if refused = publish(); refused != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(deleted)
	reviews := e.iss.Reviews() - before
	st := status.Convert(refused)
	if refused == nil {
		r.Observed = fmt.Sprintf("still accepted %.1f s after the deletion; %d TokenReviews", took.Seconds(), reviews)
		return r
	}
	r.Observed = fmt.Sprintf("10 events, then the pod deleted: %s %s after %.2f s; %d TokenReviews", st.Code(), st.Message(), took.Seconds(), reviews)
	r.Pass = st.Message() == authn.TokenInvalid.String() && reviews == 0
	return r
}

func connectorDeployment(ctx context.Context, e *env) Result {
	r := Result{Scenario: "connector (deployment): token bound to no pod", Expected: "PermissionDenied unbound_token; nothing stored"}
	ca, err := pki.NewCA("demo connector")
	if err != nil {
		return fail(r, err)
	}
	certPEM, keyPEM, err := ca.Issue("localhost", pki.LoopbackHosts...)
	if err != nil {
		return fail(r, err)
	}
	certFile, keyFile := filepath.Join(e.dir, "pc.crt"), filepath.Join(e.dir, "pc.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return fail(r, err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fail(r, err)
	}
	caFile, err := ca.WriteCA(filepath.Join(e.dir, "pc-ca.crt"))
	if err != nil {
		return fail(r, err)
	}
	addr, err := loopback.Addr()
	if err != nil {
		return fail(r, err)
	}
	o := connector.NewOptions("")
	o.Role, o.Serve.Listen, o.Serve.TLSCertFile, o.Serve.TLSKeyFile = connector.RoleDeployment, addr, certFile, keyFile
	s, stop, err := e.runConnector("deployment", o)
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	tf, err := e.tokenFile("unbound", devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-health-monitor", Audiences: []string{connectorAud}})
	if err != nil {
		return fail(r, err)
	}
	pub, err := connector.NewPublisher(credentials.Config{Address: addr, TLS: true, CAFile: caFile, ServerName: "localhost", TokenFile: tf})
	if err != nil {
		return fail(r, err)
	}
	defer pub.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = pub.PublishRetrying(cctx, &pcv1.HealthEvent{CheckName: "GpuXid", NodeName: "node-b"})
	st := status.Convert(err)
	stored, _ := s.Store().List(ctx, "", 0)
	r.Observed = fmt.Sprintf("%s %s; stored %d", st.Code(), st.Message(), len(stored))
	r.Pass = st.Code().String() == "PermissionDenied" && st.Message() == "unbound_token" && len(stored) == 0
	return r
}

func connectorConfigRefused(_ context.Context, e *env) Result {
	r := Result{Scenario: "connector: config.json with a quoted \"false\"", Expected: "refuses to start, naming the key"}
	dir := filepath.Join(e.dir, "badconfig")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(r, err)
	}
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"enableNodeBindingAuth": "false"}`), 0o600); err != nil {
		return fail(r, err)
	}
	o := connector.NewOptions(connectorNode)
	o.Socket, o.ConfigFile, o.Datastore = filepath.Join(dir, "s.sock"), cfg, filepath.Join(dir, "db")
	_, err := o.Complete()
	if err == nil {
		r.Observed = "started"
		return r
	}
	r.Observed = "refused: " + detail(err, "")
	r.Pass = strings.Contains(err.Error(), "enableNodeBindingAuth") && strings.Contains(err.Error(), "real boolean")
	return r
}
