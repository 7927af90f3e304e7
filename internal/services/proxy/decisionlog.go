package proxy

// The proxy's decision log (--decision-log): every request's verdict,
// allowed and refused, kept before the upstream sees the request, and
// its read API on a listener of its own (--decision-log-listen).

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/reason"
)

// tracerName names the proxy's own spans.
const tracerName = "github.com/callerauth/callerauth/internal/services/proxy"

// openDecisionLog opens --decision-log and, with a reader bound, the
// guard of its read API: the same caller authentication, the reader's
// binding alone, always enforced.
func (s *Server) openDecisionLog() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if s.dlog, err = decisionlog.Open(ctx, "proxy", s.c.DecisionLog, s.log); err != nil || s.dlog == nil {
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		return nil
	}
	s.health.Registry.MustRegister(s.dlog.Collectors()...)
	if s.c.DecisionLog.Mode == decisionlog.ModeRequired {
		// No request reaches the upstream that the log did not keep: a
		// proxy whose log can keep none is not ready.
		s.health.AddReadyCheck("decision log", s.dlog.Check)
	}
	switch {
	case s.c.DecisionLogListen == "":
		s.log.Warn("proxy: --decision-log is kept, but its read API is not served: give --decision-log-listen")
		return nil
	case s.c.LogReader == "":
		s.log.Warn("proxy: --decision-log-listen serves the decision log, but no --caller-binding " + decisionlog.ReaderSystem + "=PRINCIPAL names who may read it: it refuses everyone")
	}
	readers := map[string]string{}
	if s.c.LogReader != "" {
		readers[decisionlog.ReaderSystem] = s.c.LogReader
	}
	rule := binding.SystemBinding(readers) // none bound: everyone refused
	if s.reader, err = s.m.Door(callers.Service{Name: "proxy_decision_log_reader", Rule: rule}); err != nil {
		return fmt.Errorf("proxy: the decision log's readers: %w", err)
	}
	s.readLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "proxy_decision_log_read_duration_seconds", Help: "Time to answer a read of the decision log (a search, a decision with its proof, a tile).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	s.health.Registry.MustRegister(s.readLatency)
	return nil
}

// decision is what the log keeps of a request the guard judged.
func (s *Server) decision(r *http.Request, v *guard.Verdict) decisionlog.Decision {
	d := decisionlog.Decision{Method: r.Method, Path: r.URL.Path, At: time.Now()}
	if v != nil {
		d.System, d.Reason = v.System, v.Reason.String()
		if v.Caller != nil {
			d.Caller, d.Tenant = v.Caller.Username, v.Caller.Tenant
		}
	}
	return d
}

// kept passes a request the guard let through to next once the decision
// log has kept its verdict (under audit, with the violation let through);
// a verdict the log cannot keep (--decision-log-mode required) is
// refused, and the upstream never sees the request.
func (s *Server) kept(next http.Handler) http.Handler {
	if s.dlog == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := guard.FromContext(r.Context())
		d := s.decision(r, v)
		d.Allowed = true
		ctx, span := spans.Start(r.Context(), tracerName, "proxy.decision_log")
		refusal, err := s.dlog.Keep(ctx, d)
		span.End()
		if !refusal.IsZero() {
			s.log.Warn("proxy: the decision log did not keep a verdict, so the request is not passed on", "reason", refusal, "err", err)
			if isGRPC(r) {
				writeGRPCStatus(w, status.Convert(guard.Refuse(refusal, "")))
				return
			}
			guard.WriteHTTPError(w, refusal, "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// logRefusal keeps a refusal in the decision log as it has room: a
// refusal is never held up by its log.
func (s *Server) logRefusal(r *http.Request, v *guard.Verdict) {
	if s.dlog == nil {
		return
	}
	d := s.decision(r, v)
	d.Status = guard.HTTPStatus(v.Reason.Code())
	s.dlog.Refused(d)
}

// serveDecisionLog serves the log's read API on --decision-log-listen,
// TLS with the proxy's certificate, each read guarded by the reader's
// binding.
func (s *Server) serveDecisionLog() error {
	if s.dlog == nil {
		return nil
	}
	s.m.Add(s.dlog)
	if s.reader == nil {
		return nil
	}
	lis, err := serve.ListenTCP("--decision-log-listen", s.c.DecisionLogListen)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	s.m.ServeHTTP("decision log", lis, s.m.TLSConfig(), s.DecisionLogHandler())
	s.m.Set("decision_log_address", lis.Addr().String())
	return nil
}

// DecisionLogHandler is the decision log's read API (nil when not
// served): docs/decision-log.md.
func (s *Server) DecisionLogHandler() http.Handler {
	if s.reader == nil {
		return nil
	}
	mux := http.NewServeMux()
	reader := func(*http.Request) (binding.Request, error) {
		return binding.Request{System: decisionlog.ReaderSystem}, nil
	}
	s.dlog.Routes(mux, func(h http.Handler) http.Handler {
		return timed(s.readLatency, s.reader.Middleware(reader, guard.RequireIdentity())(h))
	}, func(w http.ResponseWriter, r reason.Reason, msg string) { guard.WriteHTTPError(w, r, msg) })
	return mux
}

// timed observes how long h takes.
func timed(o prometheus.Observer, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		o.Observe(time.Since(start).Seconds())
	})
}

// DecisionLog is the decision log (--decision-log), nil when none: Run
// starts it; a test that serves Handler alone starts it itself.
func (s *Server) DecisionLog() *decisionlog.Log { return s.dlog }
