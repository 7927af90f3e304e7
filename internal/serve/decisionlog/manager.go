package decisionlog

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/reason"
)

// Attach opens the service's decision log (c from Options.Complete;
// nil, nil when c asks for none) and makes it the manager's, as the
// caller stack is: its metrics in the registry (<service>_decision_log_*);
// under required, /readyz waiting on it; its run, a runnable stopped
// after the API servers have drained (serve.Manager.Run's stop order);
// its search index closed once Run has stopped everything. Call it once,
// after the manager's Guard.
func Attach(m *serve.Manager, service string, c Config) (*Log, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := Open(ctx, service, c, m.Logger())
	if err != nil || l == nil {
		return nil, err
	}
	m.Health().Registry.MustRegister(l.Collectors()...)
	if c.Mode == ModeRequired {
		// No answer leaves that the log did not keep: a service whose log
		// cannot keep any is not ready.
		m.Health().AddReadyCheck("decision log", l.Check)
	}
	m.Add(l)
	m.Finally(func() {
		if err := l.Close(); err != nil {
			m.Logger().Warn(service+": closing the decision log's search index failed", "err", err)
		}
	})
	return l, nil
}

// API is the log's read API (docs/decision-log.md "Reading it"), the same
// in every service: each read is let in by a door of the manager's caller
// authentication that admits the principal reader alone (the one
// --caller-binding binds to ReaderSystem), always enforced, whatever
// --caller-auth-mode says; a refused read is counted
// (<service>_decision_log_reader_auth_violations_total) and kept in the
// log as every refusal is. Each read's time is observed
// (<service>_decision_log_read_duration_seconds). nil when callers are not
// authenticated (--caller-auth-mode off: the log is then kept and not
// served). Call it once.
func (l *Log) API(m *serve.Manager, reader string) (http.Handler, error) {
	if !m.Authenticates() {
		return nil, nil
	}
	service := l.service
	readers := map[string]string{}
	if reader != "" {
		readers[ReaderSystem] = reader
	} else {
		m.Logger().Warn(service + ": the decision log is kept, but no --caller-binding " + ReaderSystem + "=PRINCIPAL names who may read it: its read API refuses everyone")
	}
	door, err := m.Door(callers.Service{Name: service + "_decision_log_reader", Rule: binding.SystemBinding(readers)})
	if err != nil {
		return nil, fmt.Errorf("%s: the decision log's readers: %w", service, err)
	}
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: service + "_decision_log_read_duration_seconds",
		Help: "Time to answer a read of the decision log (a search, a decision with its proof, a tile).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.Health().Registry.MustRegister(latency)
	asks := func(*http.Request) (binding.Request, error) {
		return binding.Request{System: ReaderSystem}, nil
	}
	refused := func(w http.ResponseWriter, r *http.Request, v *guard.Verdict) {
		d := Decision{System: v.System, Reason: v.Reason.String(), Path: r.URL.Path, Status: guard.HTTPStatus(v.Reason.Code()), At: time.Now()}
		if v.Caller != nil {
			d.Caller, d.Tenant = v.Caller.Username, v.Caller.Tenant
		}
		l.Refused(d)
		guard.WriteRefusal(w, v)
	}
	mux := http.NewServeMux()
	l.Routes(mux, func(h http.Handler) http.Handler {
		h = door.Middleware(asks, guard.RequireIdentity(), guard.WithRefusal(refused))(h)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			h.ServeHTTP(w, r)
			latency.Observe(time.Since(start).Seconds())
		})
	}, func(w http.ResponseWriter, r reason.Reason, msg string) { guard.WriteHTTPError(w, r, msg) })
	return mux, nil
}
