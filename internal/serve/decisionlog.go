package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/reason"
)

// OpenDecisionLog opens the service's decision log (c from
// decisionlog.Options.Complete; nil, nil when c asks for none) and makes
// it the manager's, as the caller stack is: its metrics in the registry
// (<service>_decision_log_*); under required, /readyz waiting on it; its
// run, a runnable stopped after the API servers have drained (Run's stop
// order); its search index closed once Run has stopped everything. Call
// it at most once, after Guard.
func (m *Manager) OpenDecisionLog(service string, c decisionlog.Config) (*decisionlog.Log, error) {
	if m.dlog != nil {
		return nil, errors.New("serve: a second decision log")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := decisionlog.Open(ctx, service, c, m.log)
	if err != nil || l == nil {
		return nil, err
	}
	m.dlog, m.dlogService = l, service
	m.health.Registry.MustRegister(l.Collectors()...)
	if c.Mode == decisionlog.ModeRequired {
		// No answer leaves that the log did not keep: a service whose log
		// cannot keep any is not ready.
		m.health.AddReadyCheck("decision log", l.Check)
	}
	m.Add(l)
	return l, nil
}

// DecisionLogAPI is the read API of the log OpenDecisionLog opened
// (docs/decision-log.md "Reading it"): each read is let in by a door of
// the caller authentication that admits the principal reader alone (the
// one --caller-binding binds to decisionlog.ReaderSystem), always
// enforced, whatever --caller-auth-mode says; a refused read is counted
// (<service>_decision_log_reader_auth_violations_total) and kept in the
// log as every refusal is. Each read's time is observed
// (<service>_decision_log_read_duration_seconds). nil when there is no
// log, or when callers are not authenticated (--caller-auth-mode off:
// the log is then kept and not served). Call it once.
func (m *Manager) DecisionLogAPI(reader string) (http.Handler, error) {
	if m.dlog == nil || m.stack == nil {
		return nil, nil
	}
	l, service := m.dlog, m.dlogService
	readers := map[string]string{}
	if reader != "" {
		readers[decisionlog.ReaderSystem] = reader
	} else {
		m.log.Warn(service + ": the decision log is kept, but no --caller-binding " + decisionlog.ReaderSystem + "=PRINCIPAL names who may read it: its read API refuses everyone")
	}
	door, err := m.Door(callers.Service{Name: service + "_decision_log_reader", Rule: binding.SystemBinding(readers)})
	if err != nil {
		return nil, fmt.Errorf("%s: the decision log's readers: %w", service, err)
	}
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: service + "_decision_log_read_duration_seconds",
		Help: "Time to answer a read of the decision log (a search, a decision with its proof, a tile).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.health.Registry.MustRegister(latency)
	asks := func(*http.Request) (binding.Request, error) {
		return binding.Request{System: decisionlog.ReaderSystem}, nil
	}
	refused := func(w http.ResponseWriter, r *http.Request, v *guard.Verdict) {
		d := decisionlog.Decision{System: v.System, Reason: v.Reason.String(), Path: r.URL.Path, Status: guard.HTTPStatus(v.Reason.Code()), At: time.Now()}
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

// closeDecisionLog closes the log's search index: Run's last step.
func (m *Manager) closeDecisionLog() {
	if m.dlog == nil {
		return
	}
	if err := m.dlog.Close(); err != nil {
		m.log.Warn(m.dlogService+": closing the decision log's search index failed", "err", err)
	}
}
