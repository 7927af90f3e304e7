package serve

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"

	"google.golang.org/grpc"

	"github.com/callerauth/callerauth/authn/stack"
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
//	g, err := m.Guard(cfg.Callers, stack.Spec{Audience: ..., Rule: ...})
//	m.ServeHTTP("api", lis, handler)
//	m.Set("policy_version", v)
//	return m.Run(ctx) // + the metrics listener, one start-up line, until ctx ends
type Manager struct {
	name      string
	opts      Options
	log       *slog.Logger
	health    *Health
	certs     *certReloader
	callers   []any // the caller-authentication settings, once Guard ran
	runnables []Runnable
	settings  []any
}

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

// Guard builds the service's caller authentication (stack.Build) with
// the manager's registry and logger, adds what must run beside it, and
// puts its settings on the start-up line. Call it at most once.
func (m *Manager) Guard(cfg stack.Config, spec stack.Spec) (*guard.Guard, error) {
	spec.Registry, spec.Logger = m.health.Registry, m.log
	st, err := stack.Build(cfg, spec)
	if err != nil {
		return nil, err
	}
	for _, r := range st.Runnables {
		m.Add(r)
	}
	m.callers = cfg.Settings()
	return st.Guard, nil
}

// Add adds a runnable: it starts with [Manager.Run] and stops with it.
func (m *Manager) Add(r Runnable) { m.runnables = append(m.runnables, r) }

// ServeGRPC adds a gRPC server on lis, drained for --shutdown-timeout.
func (m *Manager) ServeGRPC(name string, lis net.Listener, srv *grpc.Server) {
	m.Add(&grpcServer{Name: name, Listener: lis, Server: srv, ShutdownTimeout: m.opts.ShutdownTimeout})
}

// ServeHTTP adds an HTTP server of h on lis, bounded by the --http-*
// limits and drained for --shutdown-timeout.
func (m *Manager) ServeHTTP(name string, lis net.Listener, h http.Handler) {
	m.Add(&httpServer{Name: name, Listener: lis, Server: m.opts.HTTP.Server(h), ShutdownTimeout: m.opts.ShutdownTimeout})
}

// Set records settings (key, value pairs) for the start-up line.
func (m *Manager) Set(kv ...any) { m.settings = append(m.settings, kv...) }

// Run opens the metrics listener (--metrics-listen), logs one start-up
// line with the effective settings, and runs every runnable until ctx ends
// or one fails (runAll); a failure is logged and returned.
func (m *Manager) Run(ctx context.Context) error {
	metrics, err := m.opts.metricsServer(m.health)
	if err != nil {
		return err
	}
	line := []any{"metrics", ""}
	if metrics != nil {
		m.Add(metrics)
		line[1] = metrics.Listener.Addr().String()
	}
	line = append(line, "version", version.Get().String(), "tls", m.certs != nil, "log_level", m.opts.LogLevel, "shutdown_timeout", m.opts.ShutdownTimeout.String())
	line = append(line, m.callers...)
	m.log.Info(m.name+": serving", append(line, m.settings...)...)
	if err := runAll(ctx, m.runnables...); err != nil {
		m.log.Error(m.name+": serving failed", "err", err)
		return err
	}
	return nil
}
