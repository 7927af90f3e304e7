package connector

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/serve"
)

// Role is how the connector is deployed.
type Role string

// Roles.
const (
	// RoleSocket is the node-local DaemonSet: a Unix socket, the node from
	// NODE_NAME.
	RoleSocket Role = "socket"
	// RoleDeployment listens on TCP with TLS and has no local node.
	RoleDeployment Role = "deployment"
)

// Options configure a connector. Flags map onto them one to one.
type Options struct {
	Role          Role
	ConfigFile    string // config.json
	NodeName      string // socket role: this node
	Socket        string // socket role: the Unix socket path
	Listen        string // deployment role: host:port
	TLSCertFile   string // deployment role
	TLSKeyFile    string // deployment role
	Kubeconfig    string // TokenReview; empty: in-cluster
	Datastore     string // SQLite file
	MetricsListen string // /metrics, /healthz, /readyz
	CacheTTL      time.Duration
	ReviewTimeout time.Duration
	// MaxBatchEvents is the most events one HealthEventOccurredV1 call may
	// carry; a larger batch is refused whole (InvalidArgument). Default
	// DefaultMaxBatchEvents.
	MaxBatchEvents int
	// MaxMessageBytes is the largest request message accepted; gRPC refuses
	// a larger one whole (ResourceExhausted). Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	// HTTP bounds the clients of the metrics listener.
	HTTP   serve.HTTPLimits
	Logger *slog.Logger
	// Authenticator replaces TokenReview, for tests.
	Authenticator authn.Authenticator
}

// Defaults of the batch limits.
const (
	DefaultMaxBatchEvents  = 1000
	DefaultMaxMessageBytes = 4 << 20
)

// Validate refuses options that cannot be honoured, naming the flag. auth
// is the loaded config.json.
func (o *Options) Validate(auth AuthConfig) error {
	var errs []error
	if o.MaxBatchEvents < 1 {
		errs = append(errs, fmt.Errorf("connector: --max-batch-events %d: want at least 1", o.MaxBatchEvents))
	}
	if o.MaxMessageBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("connector: --max-message-bytes %d: want at least 1024", o.MaxMessageBytes))
	}
	if err := o.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch o.Role {
	case RoleSocket:
		if o.NodeName == "" {
			errs = append(errs, errors.New("connector: the socket role needs its node: set NODE_NAME or --node-name"))
		}
		if o.Socket == "" {
			errs = append(errs, errors.New("connector: the socket role needs --socket"))
		}
		if o.Listen != "" || o.TLSCertFile != "" || o.TLSKeyFile != "" {
			errs = append(errs, errors.New("connector: --listen, --tls-cert-file and --tls-key-file belong to the deployment role"))
		}
	case RoleDeployment:
		if !auth.EnableNodeBindingAuth {
			errs = append(errs, fmt.Errorf("connector: the deployment role requires %s: true; with no local node there is nothing to pin an unauthenticated caller to", KeyEnable))
		}
		if o.Listen == "" {
			errs = append(errs, errors.New("connector: the deployment role needs --listen"))
		}
		if o.TLSCertFile == "" || o.TLSKeyFile == "" {
			errs = append(errs, errors.New("connector: the deployment role serves TLS only: set --tls-cert-file and --tls-key-file (bearer tokens never travel over plaintext TCP)"))
		} else if _, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("connector: --tls-cert-file/--tls-key-file: %w", err))
		}
		if o.Socket != "" {
			errs = append(errs, errors.New("connector: --socket belongs to the socket role"))
		}
	default:
		errs = append(errs, fmt.Errorf("connector: --role %q: want socket or deployment", o.Role))
	}
	if o.Datastore == "" {
		errs = append(errs, errors.New("connector: --datastore is required"))
	}
	return errors.Join(errs...)
}

// Server is a running connector.
type Server struct {
	opts     Options
	auth     AuthConfig
	log      *slog.Logger
	store    *Store
	grpc     *grpc.Server
	registry *prometheus.Registry
	guard    *guard.Guard
	refused  *prometheus.CounterVec
	// The node-binding settings in force: the deployment role always
	// enforces and never fails open, whatever config.json says.
	mode     guard.Mode
	failOpen bool
}

// New loads config.json, validates the options against it, opens the
// datastore and builds the guard. Anything that cannot be honoured stops
// here, before a socket is opened.
func New(o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	auth, err := LoadAuthConfig(o.ConfigFile)
	if err != nil {
		return nil, err
	}
	if o.MaxBatchEvents == 0 {
		o.MaxBatchEvents = DefaultMaxBatchEvents
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.HTTP == (serve.HTTPLimits{}) {
		o.HTTP = serve.DefaultHTTPLimits()
	}
	if err := o.Validate(auth); err != nil {
		return nil, err
	}
	s := &Server{opts: o, auth: auth, log: log, registry: prometheus.NewRegistry(), mode: auth.Mode, failOpen: auth.FailOpenOnUnavailable}
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_connector_batches_refused_total",
		Help: "Batches refused whole for a size limit: limit=events (more than --max-batch-events) or bytes (a message over --max-message-bytes)."}, []string{"limit"})
	s.refused.WithLabelValues("events")
	s.refused.WithLabelValues("bytes")
	s.registry.MustRegister(s.refused)
	if o.Role == RoleDeployment {
		if s.mode != guard.Enforce || s.failOpen {
			log.Warn("connector: AuthMode: audit and AuthFailOpenOnUnavailable are socket settings; with no node to fall back on, the deployment connector always enforces and never fails open",
				"configured_AuthMode", string(s.mode), "configured_AuthFailOpenOnUnavailable", s.failOpen)
		}
		s.mode, s.failOpen = guard.Enforce, false
	}
	icpt := []grpc.ServerOption{grpc.MaxRecvMsgSize(o.MaxMessageBytes), grpc.StatsHandler(sizeRefusals{s.refused}),
		grpc.ChainUnaryInterceptor(s.limitBatch)}
	if auth.EnableNodeBindingAuth {
		g, err := s.newGuard()
		if err != nil {
			return nil, err
		}
		s.guard = g
		icpt = append(icpt, grpc.ChainUnaryInterceptor(g.UnaryServerInterceptor(extract)))
	} else {
		log.Error("connector: enableNodeBindingAuth is false: NO AUTHENTICATION. Any caller that can reach the socket can submit an event naming any node. This is not a supported production configuration.",
			"socket", o.Socket)
	}
	if o.Role == RoleDeployment {
		cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("connector: %w", err)
		}
		icpt = append(icpt, grpc.Creds(grpccreds.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	}
	if s.store, err = OpenStore(o.Datastore); err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(icpt...)
	pcv1.RegisterPlatformConnectorServer(s.grpc, &service{s: s})
	return s, nil
}

func (s *Server) newGuard() (*guard.Guard, error) {
	o, a := s.opts, s.auth
	mode, failOpen := s.mode, s.failOpen
	local := o.NodeName
	if o.Role == RoleDeployment {
		local = ""
	}
	authr := o.Authenticator
	if authr == nil {
		k, err := kube.New(kube.Config{Kubeconfig: o.Kubeconfig, Audiences: []string{a.Audience}, Timeout: o.ReviewTimeout})
		if err != nil {
			return nil, fmt.Errorf("connector: TokenReview: %w", err)
		}
		authr = k
	}
	m, err := guard.NewMetrics(s.registry, "platform_connector", guard.NodeBindingReasons)
	if err != nil {
		return nil, err
	}
	return guard.New(guard.Config{
		Mode: mode, FailOpenOnUnavailable: failOpen,
		Authenticator: authn.NewCache(authr, authn.CacheConfig{TTL: o.CacheTTL}),
		Rule:          binding.NodeBinding(binding.NodeConfig{LocalNode: local, CrossNode: a.CrossNodeServiceAccounts}),
		Metrics:       m,
		Logger:        s.log,
	})
}

// limitBatch refuses a batch of more than MaxBatchEvents events whole,
// before the guard or the store spends anything on it.
func (s *Server) limitBatch(ctx context.Context, msg any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if b, ok := msg.(*pcv1.HealthEvents); ok && len(b.GetEvents()) > s.opts.MaxBatchEvents {
		s.refused.WithLabelValues("events").Inc()
		return nil, status.Errorf(codes.InvalidArgument, "a batch of %d events is over the limit of %d (--max-batch-events); nothing was stored: split it", len(b.GetEvents()), s.opts.MaxBatchEvents)
	}
	return handler(ctx, msg)
}

// sizeRefusals counts the RPCs gRPC refused for a message over
// MaxRecvMsgSize: they end with ResourceExhausted before any handler or
// interceptor runs, so only a stats handler sees them.
type sizeRefusals struct{ c *prometheus.CounterVec }

func (sizeRefusals) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (sizeRefusals) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (sizeRefusals) HandleConn(context.Context, stats.ConnStats) {}
func (r sizeRefusals) HandleRPC(_ context.Context, st stats.RPCStats) {
	if end, ok := st.(*stats.End); ok && end.Error != nil && status.Code(end.Error) == codes.ResourceExhausted &&
		strings.Contains(status.Convert(end.Error).Message(), "larger than max") {
		r.c.WithLabelValues("bytes").Inc()
	}
}

// extract reads the node names of a batch for the guard.
func extract(_ context.Context, _ string, msg any) (binding.Request, error) {
	b, ok := msg.(*pcv1.HealthEvents)
	if !ok {
		return binding.Request{}, nil
	}
	nodes := make([]string, len(b.GetEvents()))
	for i, e := range b.GetEvents() {
		nodes[i] = e.GetNodeName()
	}
	return binding.Request{Nodes: nodes}, nil
}

// Registry returns the connector's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Store returns the datastore.
func (s *Server) Store() *Store { return s.store }

// Run serves until ctx ends, then stops gracefully.
func (s *Server) Run(ctx context.Context) error {
	lis, err := s.listen()
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(lis) }()
	var metrics *http.Server
	if s.opts.MetricsListen != "" {
		ml, err := net.Listen("tcp", s.opts.MetricsListen)
		if err != nil {
			s.grpc.Stop()
			return fmt.Errorf("connector: --metrics-listen: %w", err)
		}
		metrics = s.opts.HTTP.Server(s.metricsHandler())
		go func() { errc <- metrics.Serve(ml) }()
		s.log.Info("connector: metrics", "address", ml.Addr().String())
	}
	s.log.Info("connector: serving", "role", string(s.opts.Role), "address", lis.Addr().String(), "node", s.opts.NodeName,
		"nodeBindingAuth", s.auth.EnableNodeBindingAuth, "mode", string(s.mode), "failOpenOnUnavailable", s.failOpen,
		"maxBatchEvents", s.opts.MaxBatchEvents, "maxMessageBytes", s.opts.MaxMessageBytes)
	var serveErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			// A listener that died is a failed service: non-zero exit.
			serveErr = fmt.Errorf("connector: serving failed: %w", err)
			s.log.Error("connector: serving failed", "err", err)
		}
	}
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		s.grpc.Stop()
	}
	if metrics != nil {
		_ = metrics.Close()
	}
	return errors.Join(serveErr, s.store.Close())
}

func (s *Server) listen() (net.Listener, error) {
	if s.opts.Role == RoleDeployment {
		lis, err := net.Listen("tcp", s.opts.Listen)
		if err != nil {
			return nil, fmt.Errorf("connector: --listen: %w", err)
		}
		return lis, nil
	}
	if err := os.MkdirAll(filepath.Dir(s.opts.Socket), 0o750); err != nil {
		return nil, fmt.Errorf("connector: --socket: %w", err)
	}
	if err := removeStaleSocket(s.opts.Socket); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", s.opts.Socket)
	if err != nil {
		return nil, fmt.Errorf("connector: --socket: %w", err)
	}
	// Publishers on the node reach the socket through its group; reaching
	// it grants node-local scope, so no one else may.
	if err := os.Chmod(s.opts.Socket, 0o660); err != nil { //nolint:gosec // a socket needs group write for publishers to connect.
		_ = lis.Close()
		return nil, fmt.Errorf("connector: --socket: %w", err)
	}
	return lis, nil
}

// removeStaleSocket clears the way for a new socket at path: nothing there
// is fine; a socket nobody listens on (connection refused: a previous
// connector died) is removed; anything else is refused, naming it — a
// regular file is not ours to delete, and a socket that still answers
// belongs to a live process whose publishers would lose it.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("connector: --socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("connector: --socket %s exists and is not a socket (%s); refusing to remove it: choose another path or remove it yourself", path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("connector: --socket %s: another process is listening on it (it accepted a connection); refusing to take it over: stop that connector first", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("connector: --socket %s: cannot tell whether the socket is stale: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("connector: --socket %s: removing a stale socket: %w", path, err)
	}
	return nil
}

func (s *Server) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.store.db.PingContext(r.Context()); err != nil {
			http.Error(w, "datastore: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

type service struct {
	pcv1.UnimplementedPlatformConnectorServer
	s *Server
}

// HealthEventOccurredV1 stores a batch whole, with node names stamped.
func (svc *service) HealthEventOccurredV1(ctx context.Context, in *pcv1.HealthEvents) (*emptypb.Empty, error) {
	s := svc.s
	req, _ := extract(ctx, "", in)
	nodes := req.Nodes
	caller, scope := "", binding.ScopeNodeLocal
	var stamped []string
	if v, ok := guard.FromContext(ctx); ok {
		stamped = v.Stamp(nodes)
		if v.Caller != nil {
			caller = v.Caller.Username
		}
		if v.Decision.Scope != "" {
			scope = v.Decision.Scope
		}
	} else {
		// Node binding disabled: blank names still get this node.
		stamped = binding.Stamp(nodes, binding.Decision{StampNode: s.opts.NodeName})
		scope = "unauthenticated"
	}
	events := make([]*pcv1.HealthEvent, len(in.GetEvents()))
	for i, e := range in.GetEvents() {
		if stamped[i] == "" {
			return nil, status.Errorf(codes.InvalidArgument, "event %d has no node name and none could be stamped", i)
		}
		c := proto.Clone(e).(*pcv1.HealthEvent)
		c.NodeName = stamped[i]
		events[i] = c
	}
	if len(events) == 0 {
		return &emptypb.Empty{}, nil
	}
	if err := s.store.Append(ctx, caller, scope, events); err != nil {
		s.log.Error("connector: storing a batch failed", "err", err, "events", len(events))
		return nil, status.Error(codes.Unavailable, "datastore unavailable; the batch was not stored, retry")
	}
	return &emptypb.Empty{}, nil
}
