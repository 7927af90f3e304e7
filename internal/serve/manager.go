package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/version"
)

// Manager is one service process on the skeleton: its logger, its health
// registry (metrics, /healthz, /readyz), its serving certificate, its
// caller authentication and the runnables it serves. A service builds one
// with [New] after validating its options once, adds its servers and loops,
// and calls [Manager.Run]:
//
//	m, err := serve.New("pdp", cfg.Serve, cfg.Logger)
//	g, err := m.Guard(cfg.Callers, callers.Service{Name: "my_service", Rule: rule})
//	m.ServeHTTP("api", lis, m.TLSConfig(), handler)
//	m.Set("policy_version", v)
//	return m.Run(ctx) // + the metrics listener, one start-up line, until ctx ends
type Manager struct {
	name      string
	opts      Options
	log       *slog.Logger
	health    *Health
	certs     *certReloader
	callers   []any // the caller-authentication settings, once Guard ran
	stack     *callers.Stack
	runnables []Runnable
	// servers are the API listeners' servers: started once every gate is
	// ready (or StartGateTimeout has passed).
	servers  []Runnable
	gates    []gate
	serving  atomic.Bool // the API servers started
	settings []any
	// stopTracing flushes and stops the tracer provider (--otlp-endpoint);
	// nil when traces are off.
	stopTracing func(context.Context) error
	// finally runs once every runnable has stopped (Finally).
	finally []func()
}

// A gate is something a service's handlers need before its listeners
// serve: the caller stack's bound-object view proven, its issuers' keys
// fetched.
type gate struct {
	name  string
	ready func() bool
}

// StartGateTimeout bounds how long the listeners wait for the gates: a
// gate still closed then is logged and the listeners serve all the same
// (the caller stack answers without it — a token the view cannot vouch
// for is reviewed; an issuer whose keys are missing is fetched from on
// the first token), rather than a service that never serves.
const StartGateTimeout = 30 * time.Second

// New builds a service's manager. opts must have been validated (the
// service's Options.Complete does, once). log nil: JSON at --log-level on
// opts.LogOutput (default standard error). With a serving key pair
// configured, the pair is loaded now: a pair that cannot be is an error.
func New(name string, opts Options, log *slog.Logger) (*Manager, error) {
	if log == nil {
		out := opts.LogOutput
		if out == nil {
			out = os.Stderr
		}
		log = opts.Logger(out)
	}
	m := &Manager{name: name, opts: opts, log: log, health: newHealth()}
	if opts.Tracing.On() {
		var err error
		if m.stopTracing, err = opts.Tracing.start(name); err != nil {
			return nil, err
		}
	}
	if opts.HasTLS() {
		var err error
		if m.certs, err = opts.loadCerts(log); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Logger is the service's logger.
func (m *Manager) Logger() *slog.Logger { return m.log }

// Health is the service's registry and readiness checks.
func (m *Manager) Health() *Health { return m.health }

// TLSConfig serves the configured key pair, reloaded when its files
// change; nil without one.
func (m *Manager) TLSConfig() *tls.Config {
	if m.certs == nil {
		return nil
	}
	return m.certs.TLSConfig()
}

// Guard builds the service's caller authentication (callers.New) with
// the manager's registry and logger, adds what must run beside it, and
// puts its settings on the start-up line. Call it at most once. Under
// --caller-auth-mode off (cfg.Off) there is no guard: nil, and the
// start-up line says so.
func (m *Manager) Guard(cfg callers.Config, svc callers.Service) (*guard.Guard, error) {
	m.callers = cfg.Settings()
	if cfg.Off() {
		return nil, nil
	}
	svc.Registry, svc.Logger = m.health.Registry, m.log
	// The process's tracer: spans only under a request span that records
	// (--otlp-endpoint, or a test's provider), nothing otherwise.
	svc.Tracer = otel.Tracer(guard.TracerName)
	st, err := callers.New(cfg, svc)
	if err != nil {
		return nil, err
	}
	for _, r := range st.Runnables {
		m.Add(r)
		m.Gate(r.String(), r.Ready)
	}
	m.stack = st
	return st.Guard, nil
}

// Door is a second guard over the caller authentication Guard built
// (callers.Stack.Door): door's rule, always enforced, its metrics in the
// manager's registry. Guard must have built a guard.
func (m *Manager) Door(door callers.Service) (*guard.Guard, error) {
	if m.stack == nil {
		return nil, errors.New("serve: a door needs the service's caller authentication (Manager.Guard, not off)")
	}
	door.Registry, door.Logger, door.Tracer = m.health.Registry, m.log, otel.Tracer(guard.TracerName)
	return m.stack.Door(door)
}

// Finally adds what runs once Run has stopped every runnable, in the
// order added: where a service closes what its runnables used (a
// datastore), last of all.
func (m *Manager) Finally(f func()) { m.finally = append(m.finally, f) }

// Authenticates reports whether Guard built a caller authentication
// (not --caller-auth-mode off): what Door needs.
func (m *Manager) Authenticates() bool { return m.stack != nil }

// Add adds a runnable: it starts with [Manager.Run] and stops with it.
func (m *Manager) Add(r Runnable) { m.runnables = append(m.runnables, r) }

// Gate makes the API servers wait, when the manager runs, until ready
// reports true (at most StartGateTimeout): something their handlers need.
// Manager.Guard adds the caller stack's.
func (m *Manager) Gate(name string, ready func() bool) { m.gates = append(m.gates, gate{name, ready}) }

// ServeGRPC adds a gRPC server on lis, drained for --shutdown-timeout,
// serving once the gates are ready.
func (m *Manager) ServeGRPC(name string, lis net.Listener, srv *grpc.Server) {
	m.addServer(&grpcServer{Name: name, Listener: lis, Server: srv, ShutdownTimeout: m.opts.ShutdownTimeout})
}

// ServeHTTP adds an HTTP server of h on lis — over TLS with cfg, or
// plaintext when cfg is nil — bounded by the --http-* limits, its
// HTTP/1.x framing checked (HTTPLimits.Listener), drained for
// --shutdown-timeout, serving once the gates are ready.
func (m *Manager) ServeHTTP(name string, lis net.Listener, cfg *tls.Config, h http.Handler) {
	if m.opts.Tracing.On() {
		h = TraceHandler(h, m.name)
	}
	m.addServer(&httpServer{Name: name, Listener: m.opts.HTTP.Listener(lis, cfg), Server: m.opts.HTTP.server(h, m.health.malformedOf(name)), ShutdownTimeout: m.opts.ShutdownTimeout})
}

// addServer adds an API server; the first makes /readyz wait for the
// servers to serve.
func (m *Manager) addServer(r Runnable) {
	if len(m.servers) == 0 {
		m.health.AddReadyCheck("serving", m.servingCheck)
	}
	m.servers = append(m.servers, r)
}

// servingCheck is /readyz's "serving": false until the API servers serve.
func (m *Manager) servingCheck(context.Context) error {
	if m.serving.Load() {
		return nil
	}
	if closed := closedGates(m.gates); len(closed) > 0 {
		return fmt.Errorf("waiting for %s before serving", strings.Join(closed, ", "))
	}
	return errors.New("starting the API servers")
}

// Set records settings (key, value pairs) for the start-up line.
func (m *Manager) Set(kv ...any) { m.settings = append(m.settings, kv...) }

// Run opens the metrics listener (--metrics-listen), logs one start-up
// line with the effective settings, and runs every runnable until ctx ends
// or one fails; a failure is logged and returned. The start order: the
// metrics listener (/healthz, and /readyz false until the API serves)
// and every other runnable first; the API servers once every gate is
// ready, or StartGateTimeout has passed.
//
// The stop order, when ctx ends or a runnable fails, is controller-
// runtime's reversed for what a request needs: first the API servers stop
// taking requests and drain the ones in flight (for --shutdown-timeout),
// while everything those requests use still runs; once they have
// returned, every other runnable is asked to stop (the decision log then
// writes what is queued, syncs and signs its last checkpoint; the reload
// loops end); once those have, the metrics listener, which answered
// /healthz and /readyz throughout; then what Finally added (a service's
// datastores close there). Run then returns.
func (m *Manager) Run(ctx context.Context) error {
	metrics, err := m.opts.metricsServer(m.health)
	if err != nil {
		return err
	}
	line := []any{"metrics", ""}
	if metrics != nil {
		line[1] = metrics.Listener.Addr().String()
	}
	line = append(line, "version", version.Get().String(), "tls", m.certs != nil, "log_level", m.opts.LogLevel, "shutdown_timeout", m.opts.ShutdownTimeout.String(),
		"otlp_endpoint", m.opts.Tracing.Endpoint)
	line = append(line, m.callers...)
	m.log.Info(m.name+": serving", append(line, m.settings...)...)
	var api []Runnable
	if len(m.servers) > 0 {
		api = []Runnable{&gatedServers{gates: m.gates, servers: m.servers, log: m.log, name: m.name, timeout: StartGateTimeout, serving: &m.serving}}
	}
	var last []Runnable
	if metrics != nil {
		last = []Runnable{metrics}
	}
	err = runInOrder(ctx, api, m.runnables, last)
	for _, f := range m.finally {
		f()
	}
	if m.stopTracing != nil {
		if serr := m.stopTracing(context.WithoutCancel(ctx)); serr != nil {
			m.log.Warn(m.name+": flushing the last spans failed", "err", serr)
		}
	}
	if err != nil {
		m.log.Error(m.name+": serving failed", "err", err)
		return err
	}
	return nil
}

// gatedServers starts the API servers once every gate is ready (or after
// timeout), then runs them.
type gatedServers struct {
	gates   []gate
	servers []Runnable
	log     *slog.Logger
	name    string
	timeout time.Duration
	serving *atomic.Bool
}

func (g *gatedServers) String() string { return "the API servers" }

// Start implements [Runnable].
func (g *gatedServers) Start(ctx context.Context) error {
	start := time.Now()
	deadline := time.NewTimer(g.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(gatePoll)
	defer tick.Stop()
wait:
	for {
		waiting := closedGates(g.gates)
		if len(waiting) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			g.log.Warn(g.name+": serving before every gate is ready", "waited", g.timeout.String(), "not_ready", waiting)
			break wait
		case <-tick.C:
		}
	}
	if len(g.gates) > 0 {
		g.log.Info(g.name+": gates passed, serving the API", "after", time.Since(start).Round(time.Millisecond).String())
	}
	g.serving.Store(true)
	return runAll(ctx, g.servers...)
}

// closedGates names the gates not ready yet.
func closedGates(gates []gate) []string {
	var names []string
	for _, g := range gates {
		if !g.ready() {
			names = append(names, g.name)
		}
	}
	return names
}

// gatePoll is how often the gates are looked at.
const gatePoll = 50 * time.Millisecond
