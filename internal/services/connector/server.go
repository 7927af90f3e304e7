package connector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/foundation/window"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/reason"
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

// Defaults of the socket, the batch limits, the quota, the key retention
// and the datastore's bound.
const (
	DefaultSocket = "/var/run/nvsentinel/platform-connector.sock"
	// MaxSocketPath is the longest path a Unix socket may have on Linux
	// (sun_path holds 108 bytes, the last a NUL).
	MaxSocketPath            = 107
	DefaultMaxBatchEvents    = 1000
	DefaultMaxMessageBytes   = 4 << 20
	DefaultQuotaEvents       = 60000
	DefaultQuotaWindow       = time.Minute
	DefaultKeyRetention      = 24 * time.Hour
	DefaultMaxDatastoreBytes = 4 << 30
)

// Server is a running connector.
type Server struct {
	opts    Config
	auth    AuthConfig
	log     *slog.Logger
	store   *Store
	grpc    *grpc.Server
	health  *serve.Health
	m       *serve.Manager
	guard   *guard.Guard
	refused *prometheus.CounterVec
	stored  prometheus.Counter // events
	failed  prometheus.Counter // batches the datastore could not store
	// duplicates are retried batches whose idempotency key was stored.
	duplicates prometheus.Counter
	// quota counts each caller's events in its window; size is what the
	// datastore held at its last look; quotaRefused and keysExpired count.
	quota        *window.Counter
	size         atomic.Int64
	quotaRefused *prometheus.CounterVec
	keysExpired  prometheus.Counter
	// publishers is what each publisher's events take, counted from the
	// datastore every recountEvery and as batches are stored.
	pubMu      sync.Mutex
	publishers map[string]int64
}

// metricsPrefix starts the connector's metric names.
const metricsPrefix = "platform_connector"

// New opens the datastore and builds the guard, as c says. Anything that
// cannot be honoured stops here, before a socket is opened.
func New(c Config) (*Server, error) {
	m, err := serve.New("connector", c.Serve, c.Logger)
	if err != nil {
		return nil, fmt.Errorf("connector: %w", err)
	}
	m.Health().Registry.MustRegister(serve.BuildInfo("platform_connector"))
	log := m.Logger()
	s := &Server{opts: c, auth: c.Auth, m: m, log: log, health: m.Health()}
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_connector_batches_refused_total",
		Help: "Batches refused whole for a size limit: limit=events (more than --max-batch-events) or bytes (a message over --max-message-bytes)."}, []string{"limit"})
	s.refused.WithLabelValues("events")
	s.refused.WithLabelValues("bytes")
	s.stored = prometheus.NewCounter(prometheus.CounterOpts{Name: "platform_connector_events_stored_total",
		Help: "Events stored (durable before the call returned)."})
	s.failed = prometheus.NewCounter(prometheus.CounterOpts{Name: "platform_connector_datastore_failures_total",
		Help: "Batches the datastore could not store (answered Unavailable; nothing of them was stored, the publisher retries)."})
	s.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "platform_connector_duplicate_batches_total",
		Help: "Batches answered OK without being stored again: a retry whose idempotency key the datastore already held (a connection cut after the commit)."})
	s.quota = window.New(c.QuotaWindow, maxQuotaKeys)
	s.quotaRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_connector_quota_refusals_total",
		Help: "Batches refused ResourceExhausted, by reason: publisher_quota (the caller stored --caller-quota-events in its window), publisher_share_full (the publisher's events take --max-publisher-bytes), datastore_full (the datastore holds --max-datastore-bytes)."}, []string{"reason"})
	s.quotaRefused.WithLabelValues(ReasonPublisherQuota.String())
	s.quotaRefused.WithLabelValues(ReasonDatastoreFull.String())
	s.quotaRefused.WithLabelValues(ReasonPublisherShareFull.String())
	s.keysExpired = prometheus.NewCounter(prometheus.CounterOpts{Name: "platform_connector_idempotency_keys_expired_total",
		Help: "Idempotency keys forgotten after --idempotency-key-retention."})
	s.health.Registry.MustRegister(s.refused, s.stored, s.failed, s.duplicates, s.quotaRefused, s.keysExpired,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "platform_connector_datastore_bytes", Help: "Bytes the datastore held at its last look (every few seconds, its write-ahead log included); new batches are refused at --max-datastore-bytes."},
			func() float64 { return float64(s.size.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "platform_connector_publisher_bytes_max", Help: "What the events of the publisher that stored most take; its batches are refused at --max-publisher-bytes."},
			func() float64 { return float64(s.largestPublisher()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "platform_connector_publishers", Help: "Publishers whose events the datastore holds."},
			func() float64 { s.pubMu.Lock(); defer s.pubMu.Unlock(); return float64(len(s.publishers)) }))
	rpcMetrics, err := serve.NewRPCMetrics(s.health.Registry, metricsPrefix)
	if err != nil {
		return nil, err
	}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(c.MaxMessageBytes), grpc.StatsHandler(sizeRefusals{s.refused}),
		grpc.ChainUnaryInterceptor(rpcMetrics.Interceptor, s.limitBatch)}
	if c.Role == RoleDeployment {
		if c.Auth.Mode != guard.Enforce || c.Auth.FailOpenOnUnavailable {
			log.Warn("connector: AuthMode: audit and AuthFailOpenOnUnavailable are socket settings; with no node to fall back on, the deployment connector always enforces and never fails open",
				"configured_AuthMode", string(c.Auth.Mode), "configured_AuthFailOpenOnUnavailable", c.Auth.FailOpenOnUnavailable)
		}
		opts = append(opts, grpc.Creds(grpccreds.NewTLS(m.TLSConfig())))
	} else {
		opts = append(opts, grpc.Creds(peerCreds{}))
	}
	if c.Auth.EnableNodeBindingAuth {
		local := c.NodeName
		if c.Role == RoleDeployment {
			local = ""
		}
		nm, err := binding.NewNodeMetrics(s.health.Registry, metricsPrefix)
		if err != nil {
			return nil, fmt.Errorf("connector: %w", err)
		}
		s.guard, err = m.Guard(c.Callers, callers.Service{Name: metricsPrefix,
			Rule: binding.NodeBinding(binding.NodeConfig{LocalNode: local, CrossNode: c.Auth.CrossNodeServiceAccounts, Metrics: nm})})
		if err != nil {
			return nil, fmt.Errorf("connector: caller authentication: %w", err)
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(s.guard.UnaryServerInterceptor(extract)))
	} else {
		log.Error("connector: enableNodeBindingAuth is false: NO AUTHENTICATION. Any caller that can reach the socket can submit an event naming any node. This is not a supported production configuration.",
			"socket", c.Socket)
	}
	if s.store, err = OpenStore(c.Datastore); err != nil {
		return nil, hostDirHint(c.Role, "--datastore", err)
	}
	s.health.AddReadyCheck("datastore", func(ctx context.Context) error { return s.store.db.PingContext(ctx) })
	if err := s.measure(context.Background()); err != nil {
		return nil, err
	}
	if err := s.recount(context.Background()); err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(append(opts, m.GRPCServerOptions()...)...)
	pcv1.RegisterPlatformConnectorServer(s.grpc, &service{s: s})
	rpcMetrics.Init(s.grpc)
	return s, nil
}

// limitBatch refuses a batch of more than MaxBatchEvents events whole,
// before the guard or the store spends anything on it.
func (s *Server) limitBatch(ctx context.Context, msg any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if b, ok := msg.(*pcv1.HealthEvents); ok && len(b.GetEvents()) > s.opts.MaxBatchEvents {
		s.refused.WithLabelValues("events").Inc()
		return nil, guard.Refuse(ReasonBatchTooLarge, fmt.Sprintf("a batch of %d events is over the limit of %d (--max-batch-events); nothing was stored: split it", len(b.GetEvents()), s.opts.MaxBatchEvents))
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
	return binding.NodesRequest(nodeNames(b)), nil
}

// nodeNames are the node names of a batch's events, "" where one left it
// blank.
func nodeNames(b *pcv1.HealthEvents) []string {
	nodes := make([]string, len(b.GetEvents()))
	for i, e := range b.GetEvents() {
		nodes[i] = e.GetNodeName()
	}
	return nodes
}

// Registry returns the connector's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.health.Registry }

// Store returns the datastore.
func (s *Server) Store() *Store { return s.store }

// Run serves until ctx ends, through the service skeleton: gRPC on the
// socket (socket role) or on TCP with TLS reloaded on change (deployment
// role), and the metrics listener. A listener that cannot be opened, or
// dies, is an error; the datastore is closed either way.
func (s *Server) Run(ctx context.Context) (err error) {
	defer func() { err = errors.Join(err, s.store.Close()) }()
	var lis net.Listener
	if s.opts.Role == RoleDeployment {
		lis, err = serve.ListenTCP("--listen", s.opts.Serve.Listen)
	} else {
		// Publishers on the node reach the socket through its group;
		// reaching it grants node-local scope, so no one else may.
		lis, err = serve.ListenUnix("--socket", s.opts.Socket, 0o660)
	}
	if err != nil {
		return hostDirHint(s.opts.Role, "--socket", fmt.Errorf("connector: %w", err))
	}
	s.m.ServeGRPC("grpc", lis, s.grpc)
	s.m.Add(serve.Named("datastore housekeeping", serve.RunnableFunc(s.housekeeping)))
	s.m.Set("role", string(s.opts.Role), "address", lis.Addr().String(), "node", s.opts.NodeName,
		"nodeBindingAuth", s.auth.EnableNodeBindingAuth, "mode", s.opts.Callers.ModeName(),
		"failOpenOnUnavailable", s.opts.Callers.FailOpen(), "maxBatchEvents", s.opts.MaxBatchEvents, "maxMessageBytes", s.opts.MaxMessageBytes,
		"quotaEvents", s.opts.QuotaEvents, "quotaWindow", s.opts.QuotaWindow.String(), "idempotencyKeyRetention", s.opts.KeyRetention.String(),
		"maxDatastoreBytes", s.opts.MaxDatastoreBytes)
	if err := s.m.Run(ctx); err != nil {
		_ = lis.Close()
		return fmt.Errorf("connector: %w", err)
	}
	return nil
}

type service struct {
	pcv1.UnimplementedPlatformConnectorServer
	s *Server
}

// HealthEventOccurredV1 stores a batch whole, with node names stamped.
func (svc *service) HealthEventOccurredV1(ctx context.Context, in *pcv1.HealthEvents) (*emptypb.Empty, error) {
	s := svc.s
	nodes := nodeNames(in)
	caller, scope, podUID := "", binding.ScopeNodeLocal, ""
	var stamped []string
	if v, ok := guard.FromContext(ctx); ok {
		grant := binding.NodeGrantOf(v.Grant)
		stamped = grant.Stamp(nodes)
		if v.Caller != nil {
			caller, podUID = v.Caller.Username, v.Caller.PodUID
		}
		if grant != nil && grant.Scope != "" {
			scope = grant.Scope
		}
	} else {
		// Node binding disabled: blank names still get this node.
		stamped = binding.StampNodes(nodes, s.opts.NodeName)
		scope = "unauthenticated"
	}
	events := make([]*pcv1.HealthEvent, len(in.GetEvents()))
	for i, e := range in.GetEvents() {
		if stamped[i] == "" {
			return nil, guard.Refuse(ReasonEventNodeUnnamed, fmt.Sprintf("event %d has no node name and none could be stamped", i))
		}
		c := proto.Clone(e).(*pcv1.HealthEvent)
		c.NodeName = stamped[i]
		events[i] = c
	}
	// The key is checked whatever the batch holds: an empty batch with a
	// key no batch could carry is as wrong as a full one.
	key := in.GetIdempotencyKey()
	if !validKey(key) {
		return nil, guard.Refuse(ReasonBadIdempotencyKey, fmt.Sprintf("idempotency_key: at most %d characters of [A-Za-z0-9._:-]; nothing was stored", MaxIdempotencyKey))
	}
	if len(events) == 0 {
		return &emptypb.Empty{}, nil
	}
	if n := s.size.Load(); n >= s.opts.MaxDatastoreBytes {
		s.quotaRefused.WithLabelValues(ReasonDatastoreFull.String()).Inc()
		return nil, guard.Refuse(ReasonDatastoreFull, fmt.Sprintf("the datastore holds %d bytes, its bound (--max-datastore-bytes %d); nothing was stored: retry once it has been pruned", n, s.opts.MaxDatastoreBytes))
	}
	pub := publisherOf(ctx, caller, podUID)
	if n := s.publisherBytes(pub); n >= s.opts.MaxPublisherBytes {
		// This publisher's share is full; the others' batches are still
		// stored.
		s.quotaRefused.WithLabelValues(ReasonPublisherShareFull.String()).Inc()
		return nil, guard.Refuse(ReasonPublisherShareFull, fmt.Sprintf("this publisher's events take %d bytes, its share of the datastore (--max-publisher-bytes %d); nothing was stored: retry once its old events have been pruned", n, s.opts.MaxPublisherBytes))
	}
	who := caller + "#" + podUID // tokenless callers: all "#"
	if ok, retry := s.quota.Take(who, len(events), s.opts.QuotaEvents, time.Now()); !ok {
		s.quotaRefused.WithLabelValues(ReasonPublisherQuota.String()).Inc()
		return nil, guard.Refuse(ReasonPublisherQuota, fmt.Sprintf("this caller has stored its quota of %d events in %s (--caller-quota-events, --caller-quota-window); nothing was stored: retry in %s", s.opts.QuotaEvents, s.opts.QuotaWindow, retry.Round(time.Second)))
	}
	switch {
	case key == "":
	case podUID != "":
		// Keys belong to the bound identity: two pods of one service
		// account each have their own (the pod's UID, which a recreated
		// pod of the same name does not share).
		key = "pod:" + podUID + "/" + key
	case caller == "":
		// A caller without a token: its process, as the kernel names it
		// on the socket, so that tokenless callers do not share keys.
		if p := peerKey(ctx); p != "" {
			key = p + "/" + key
		}
	}
	duplicate, stored, err := s.append(ctx, pub, caller, scope, key, events)
	switch {
	case errors.Is(err, ErrKeyReused):
		return nil, guard.Refuse(ReasonKeyReused, "idempotency_key was already used for another batch of yours; nothing was stored")
	case err != nil:
		s.failed.Inc()
		s.log.Error("connector: storing a batch failed", "err", err, "events", len(events))
		return nil, guard.Refuse(datastore.ReasonUnavailable, "datastore unavailable; the batch was not stored, retry")
	case duplicate:
		// A retry of a stored batch (a connection cut after the commit):
		// answered as the first time, stored once.
		s.duplicates.Inc()
		s.log.Info("connector: a retried batch was already stored", "events", len(events), "caller", guard.LogValue(caller))
		return &emptypb.Empty{}, nil
	}
	s.stored.Add(float64(len(events)))
	// Counted at once, so that a fast publisher meets the bound within a
	// batch of it, not a few seconds later; the next look corrects it.
	s.size.Add(int64(proto.Size(in)))
	s.pubMu.Lock()
	s.publishers[pub] += stored
	s.pubMu.Unlock()
	return &emptypb.Empty{}, nil
}

// maxQuotaKeys bounds the callers whose events are counted at once.
const maxQuotaKeys = 1 << 16

// measure reads how much the datastore holds.
func (s *Server) measure(ctx context.Context) error {
	n, err := s.store.Size(ctx)
	if err != nil {
		return err
	}
	s.size.Store(n)
	return nil
}

// recount reads what each publisher's events take, from the datastore's
// index: events pruned since are no longer counted.
func (s *Server) recount(ctx context.Context) error {
	p, err := s.store.PublisherBytes(ctx)
	if err != nil {
		return err
	}
	s.pubMu.Lock()
	s.publishers = p
	s.pubMu.Unlock()
	return nil
}

// recountEvery is how often each publisher's share is read anew.
const recountEvery = 30 * time.Second

func (s *Server) publisherBytes(pub string) int64 {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	return s.publishers[pub]
}

func (s *Server) largestPublisher() int64 {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	var most int64
	for _, n := range s.publishers {
		most = max(most, n)
	}
	return most
}

// publisherOf names who stores a batch, for its share of the datastore:
// the pod of a pod-bound token (each replica of a monitor its own share),
// the caller's name for another token, and for a caller without one its
// user on the node as the kernel names it (a restarted process keeps its
// share), or all such callers together when the kernel did not say.
func publisherOf(ctx context.Context, caller, podUID string) string {
	switch {
	case podUID != "":
		return "pod:" + podUID
	case caller != "":
		return caller
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(PeerInfo); ok && info.PID != 0 {
			return fmt.Sprintf("peer-uid:%d", info.UID)
		}
	}
	return "tokenless"
}

// housekeeping looks at the datastore's size every few seconds and
// forgets idempotency keys past their retention, until ctx ends.
func (s *Server) housekeeping(ctx context.Context) error {
	sizeEvery := 2 * time.Second
	expireEvery := min(s.opts.KeyRetention/10, time.Hour)
	size, expire, recount := time.NewTicker(sizeEvery), time.NewTicker(expireEvery), time.NewTicker(recountEvery)
	defer size.Stop()
	defer expire.Stop()
	defer recount.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-size.C:
			if err := s.measure(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("connector: measuring the datastore failed", "err", err)
			}
		case <-recount.C:
			if err := s.recount(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("connector: counting the publishers' events failed", "err", err)
			}
		case <-expire.C:
			n, err := s.store.ExpireKeys(ctx, time.Now().Add(-s.opts.KeyRetention))
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("connector: expiring idempotency keys failed", "err", err)
				}
				continue
			}
			s.keysExpired.Add(float64(n))
		}
	}
}

// MaxIdempotencyKey bounds a batch's idempotency key.
const MaxIdempotencyKey = 128

// The connector's own refusals (after the guard's); a store that fails
// answers datastore.ReasonUnavailable.
var (
	ReasonBatchTooLarge     = reason.New("batch_too_large", reason.InvalidArgument, "the batch holds more events than --max-batch-events; nothing was stored: split it")
	ReasonEventNodeUnnamed  = reason.New("event_node_unnamed", reason.InvalidArgument, "an event names no node and none could be stamped (node binding off and no --node-name)")
	ReasonBadIdempotencyKey = reason.New("idempotency_key_invalid", reason.InvalidArgument, "the batch's idempotency key is too long or has a character outside [A-Za-z0-9._:-]")
	ReasonKeyReused         = reason.New("idempotency_key_reused", reason.InvalidArgument, "the batch's idempotency key names another batch already stored")
	ReasonPublisherQuota    = reason.New("publisher_quota", reason.ResourceExhausted, "the caller has stored its quota of events for now (--caller-quota-events per --caller-quota-window); retry after the delay the message gives")
	ReasonDatastoreFull     = reason.New("datastore_full", reason.ResourceExhausted, "the datastore holds --max-datastore-bytes: new batches are refused, never the disk filled")
	// ReasonPublisherShareFull refuses the one publisher whose events take
	// its share (--max-publisher-bytes), not every node's.
	ReasonPublisherShareFull = reason.New("publisher_share_full", reason.ResourceExhausted, "this publisher's events take its share of the datastore (--max-publisher-bytes): its new batches are refused, the others' still stored")
)

// validKey reports whether key is empty or at most MaxIdempotencyKey
// characters of [A-Za-z0-9._:-].
func validKey(key string) bool {
	if len(key) > MaxIdempotencyKey {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// Reasons are every refusal the connector can send: the authentication
// failures, node binding's, a request it could not read, the datastore's
// and its own. docs/platform-connector.md lists each; test/reasons holds
// the code to this list.
func Reasons() []reason.Reason {
	return reason.Union(binding.Reasons(binding.NodeBinding(binding.NodeConfig{})), guard.ReasonBadRequest, datastore.ReasonUnavailable,
		ReasonBatchTooLarge, ReasonEventNodeUnnamed, ReasonBadIdempotencyKey, ReasonKeyReused, ReasonPublisherQuota, ReasonPublisherShareFull, ReasonDatastoreFull)
}

// hostDirHint adds to a permission error of the socket role's socket or
// datastore what a node needs: its hostPath directories are the kubelet's,
// root's, until the chart's init container (daemonset.prepareHostDirs)
// or the node's provisioning gives them to the pod's user.
func hostDirHint(role Role, flag string, err error) error {
	// SQLite says "permission denied" or "readonly" in its own words,
	// wrapping no error of the os.
	msg := err.Error()
	denied := errors.Is(err, fs.ErrPermission) || strings.Contains(msg, "permission denied") || strings.Contains(msg, "read-only file system") || strings.Contains(msg, "readonly database")
	if role != RoleSocket || !denied {
		return err
	}
	return fmt.Errorf("%w: the %s directory is not writable by UID %d GID %d; on a node, the chart's daemonset.prepareHostDirs (default true) gives the hostPath directories to the pod's user, or provision them owned by it (docs/deploy.md, \"The socket role\")",
		err, flag, os.Getuid(), os.Getgid())
}

// tracerName names the connector's spans.
const tracerName = "github.com/callerauth/callerauth/internal/services/connector"

// append stores a batch (Store.Append) in a span of its own when the
// call is traced (connector.store, the database conventions' attributes:
// the datastore, the operation, the table; how many events, whether the
// batch was a retry already stored). No event, caller or key is in it.
func (s *Server) append(ctx context.Context, pub, caller, scope, key string, events []*pcv1.HealthEvent) (bool, int64, error) {
	ctx, span := spans.Start(ctx, tracerName, "connector.store")
	defer span.End()
	duplicate, stored, err := s.store.Append(ctx, pub, caller, scope, key, events)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("db.system.name", s.store.db.Dialect.SystemName()), attribute.String("db.operation.name", "INSERT"),
			attribute.String("db.collection.name", "health_events"), attribute.Int("connector.events", len(events)), attribute.Bool("connector.duplicate", duplicate))
		if err != nil {
			spans.Fail(span, "the batch was not stored")
		}
	}
	return duplicate, stored, err
}
