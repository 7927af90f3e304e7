package proxy

// The proxy's decision log (--decision-log): every request's verdict,
// allowed and refused, kept before the upstream sees the request, and
// its read API on a listener of its own (--decision-log-listen).

import (
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
)

// tracerName names the proxy's own spans.
const tracerName = "github.com/callerauth/callerauth/internal/services/proxy"

// openDecisionLog opens --decision-log through the manager, which owns
// it (its metrics, readiness, run and close), and, served on
// --decision-log-listen, its read API: the manager's, the reader's
// binding alone, always enforced.
func (s *Server) openDecisionLog() error {
	var err error
	if s.dlog, err = decisionlog.Attach(s.m, "proxy", s.c.DecisionLog); err != nil || s.dlog == nil {
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		return nil
	}
	if s.c.DecisionLogListen == "" {
		s.log.Warn("proxy: --decision-log is kept, but its read API is not served: give --decision-log-listen")
		return nil
	}
	if s.dlogAPI, err = s.dlog.API(s.m, s.c.LogReader); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
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
// TLS with the proxy's certificate.
func (s *Server) serveDecisionLog() error {
	if s.dlogAPI == nil {
		return nil
	}
	lis, err := serve.ListenTCP("--decision-log-listen", s.c.DecisionLogListen)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	s.m.ServeHTTP("decision log", lis, s.m.TLSConfig(), s.dlogAPI)
	s.m.Set("decision_log_address", lis.Addr().String())
	return nil
}

// DecisionLogHandler is the decision log's read API (nil when not
// served): docs/decision-log.md.
func (s *Server) DecisionLogHandler() http.Handler { return s.dlogAPI }

// DecisionLog is the decision log (--decision-log), nil when none: Run
// starts it; a test that serves Handler alone starts it itself.
func (s *Server) DecisionLog() *decisionlog.Log { return s.dlog }
