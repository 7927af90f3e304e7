package pdp

// POST /v1/check: the guarded handler, the decision, the signed record and
// the refusals.

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
	"github.com/callerauth/callerauth/reason"
)

// checkHandler is POST /v1/check: the guard's middleware (the caller
// first, from the header alone — under enforce a caller with no identity is
// refused before a byte of the body is read — then the body, then the
// system binding), then the decision. With caller authentication off there
// is no middleware.
func (s *Server) checkHandler() http.Handler {
	return s.guarded(s.extract, s.withinShare(http.HandlerFunc(s.decide)), s.latency)
}

// guarded wraps an API handler as every endpoint is wrapped: the guard's
// middleware with extract (or, with caller authentication off, extract
// alone), and the request's latency observed.
func (s *Server) guarded(extract guard.HTTPRequest, h http.Handler, latency prometheus.Observer) http.Handler {
	var inner http.Handler
	if s.guard == nil {
		inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := extract(r); err != nil {
				badRequest(w, r, err)
				return
			}
			h.ServeHTTP(w, r)
		})
	} else {
		inner = s.guard.Middleware(extract, guard.RequireIdentity(), guard.WithBadRequest(badRequest),
			guard.WithRefusal(s.refuse))(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { latency.Observe(time.Since(start).Seconds()) }()
		inner.ServeHTTP(w, r)
	})
}

// extract reads and checks the body for the guard, and leaves it readable
// for decide.
func (s *Server) extract(r *http.Request) (binding.Request, error) {
	body, err := readBody(r)
	if err != nil {
		return binding.Request{}, err
	}
	req, err := decodeRequest(body)
	if err != nil {
		return binding.Request{}, err
	}
	r.Body = &decodedBody{ReadCloser: readCloser(body), req: req}
	return binding.Request{System: req.System, Method: "POST /v1/check"}, nil
}

func badRequest(w http.ResponseWriter, _ *http.Request, err error) {
	field := "body"
	var re *requestError
	if errors.As(err, &re) {
		field = re.field
	}
	guard.WriteHTTPError(w, guard.ReasonBadRequest, err.Error(), "field", field)
}

// tracerName names the pdp's spans.
const tracerName = "github.com/callerauth/callerauth/internal/services/pdp"

// decide evaluates a request the middleware let through and signs the
// record.
func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	req, err := s.request(r)
	if err != nil {
		badRequest(w, r, err)
		return
	}
	caller, mode := s.caller(r)
	st := s.state.Get() // one snapshot: policy, registry and signer
	if st.pkg.API != policy.APICheck {
		guard.WriteHTTPError(w, ReasonAPINotServed, fmt.Sprintf("policy package %s serves AuthZEN (POST %s), not /v1/check", st.pkg.ID, PathEvaluation))
		return
	}
	_, span := spans.Start(r.Context(), tracerName, "pdp.evaluate")
	d := st.pkg.Evaluate(st.reg, *req)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("callerauth.allowed", d.Allow), attribute.String("callerauth.reason", d.Reason))
	}
	span.End()
	if d.Detail != "" {
		s.log.Info("pdp: denied against the registry", "reason", d.Reason, "detail", guard.LogValue(d.Detail))
	}
	rec := &decision.Record{DecisionID: uuid.NewString(), Reason: d.Reason, PolicyVersion: st.pkg.Version, Caller: caller,
		Provenance: decision.Provenance{Evaluator: policy.Evaluator, Mode: mode, PolicyPackageID: st.pkg.ID,
			PolicyPackageDigest: st.pkg.Digest, RegistrySnapshotDigest: st.reg.Digest, DecidedAt: s.now().UTC()}}
	rec.Effect = decision.Deny
	if d.Allow {
		rec.Effect = decision.Allow
	}
	rec.BindCanonical(req.Canonical())
	var body []byte
	_, span = spans.Start(r.Context(), tracerName, "pdp.sign")
	defer span.End()
	kept := false
	if st.group != nil {
		// Under a required decision log the group's signer keeps the
		// whole group in one commit before any of it is answered
		// (keepGroup).
		var k *groupKept
		var with any
		if s.dlog != nil && s.dlog.Required() {
			k = &groupKept{ctx: r.Context(), d: s.logged(r, rec.Effect == decision.Allow, rec.Reason)}
			with = k
		}
		g, err := st.group.SignWith(rec, with)
		if err != nil {
			s.signingFailed(w, err)
			return
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("pdp.group_records", g.Records))
		}
		switch {
		case k == nil:
			body = groupBody(g)
		case !k.refusal.IsZero():
			s.notKept(w, k.refusal, k.err)
			return
		default:
			// The answer keepGroup wrote for the log, given as it was
			// kept, not written again.
			body, kept = k.body, true
		}
	} else {
		signed, err := st.signer.Sign(rec)
		if err != nil {
			s.signingFailed(w, err)
			return
		}
		body = responseBody(signed)
	}
	if !kept && !s.keep(w, r, rec.Effect == decision.Allow, rec.Reason, body) {
		return
	}
	s.checks.WithLabelValues(rec.Effect, rec.Reason).Inc()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// keep puts an answer in the decision log (--decision-log) before it is
// given; false: the log refused it, and the refusal is answered.
func (s *Server) keep(w http.ResponseWriter, r *http.Request, allowed bool, why string, body []byte) bool {
	if s.dlog == nil {
		return true
	}
	d := s.logged(r, allowed, why)
	d.Answer = body
	ctx, span := spans.Start(r.Context(), tracerName, "pdp.decision_log")
	defer span.End()
	refusal, err := s.dlog.Keep(ctx, d)
	if refusal.IsZero() {
		return true
	}
	s.notKept(w, refusal, err)
	return false
}

// logged is what the decision log keeps of an answer to r, less the
// answer.
func (s *Server) logged(r *http.Request, allowed bool, why string) decisionlog.Decision {
	d := decisionlog.Decision{Allowed: allowed, Reason: why, Path: r.URL.Path, Status: http.StatusOK, At: s.now()}
	if v, ok := guard.FromContext(r.Context()); ok {
		d.System = v.System
		if v.Caller != nil {
			d.Caller, d.Tenant = v.Caller.Username, v.Caller.Tenant
		}
	}
	return d
}

// withinShare refuses a caller that holds its share of the decision log
// (429 decision_log_quota_exceeded) before anything is evaluated or
// signed for it: the log would not keep the answer, so it is not made.
func (s *Server) withinShare(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.dlog != nil {
			caller := ""
			if v, ok := guard.FromContext(r.Context()); ok && v.Caller != nil {
				caller = v.Caller.Username
			}
			if err := s.dlog.Within(caller); err != nil {
				s.notKept(w, decisionlog.ReasonQuotaExceeded, err)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// notKept answers the decision log's refusal to keep an answer.
func (s *Server) notKept(w http.ResponseWriter, refusal reason.Reason, err error) {
	s.log.Warn("pdp: the decision log did not keep an answer, so it is not given", "reason", refusal, "err", err)
	guard.WriteHTTPError(w, refusal, "")
}

// groupKept is a check's decision handed to its signing group under a
// required decision log: what keepGroup keeps of it (its answer filled
// in once signed), and what came of it.
type groupKept struct {
	ctx     context.Context
	d       decisionlog.Decision
	body    []byte // the answer, once signed
	refusal reason.Reason
	err     error
}

// keepTimeout bounds how long a signing group waits for its decisions'
// commit: past it, every answer of the group is refused
// (decision_log_unavailable).
const keepTimeout = 10 * time.Second

// keepGroup is the check group's Then under a required decision log: the
// group's decisions, kept in one commit before any is answered, so that
// an answer waits once, for its group, not again in a queue of its own
// after its signature.
func (s *Server) keepGroup(signed []decision.GroupSigned, with []any) {
	var ks []*groupKept
	var ds []decisionlog.Decision
	for i, w := range with {
		k, ok := w.(*groupKept)
		if !ok {
			continue
		}
		k.body = groupBody(signed[i])
		k.d.Answer = k.body
		ks, ds = append(ks, k), append(ds, k.d)
	}
	if len(ks) == 0 {
		return
	}
	// Each request's trace shows the group's commit it waited for.
	ends := make([]func(...trace.SpanEndOption), len(ks))
	for i, k := range ks {
		_, span := spans.Start(k.ctx, tracerName, "pdp.decision_log")
		ends[i] = span.End
	}
	// The group's commit is the group's, not the request's that happened
	// to sign it: its deadline is its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ks[0].ctx), keepTimeout)
	defer cancel()
	for i, kept := range s.dlog.KeepAll(ctx, ds) {
		ks[i].refusal, ks[i].err = kept.Refusal, kept.Err
		ends[i]()
	}
}

// groupBody is a group-signed check's response: {"record", "root_jws",
// "proof"} (decision.Signed).
func groupBody(g decision.GroupSigned) []byte {
	b := make([]byte, 0, len(g.Record)+len(g.RootJWS)+64+48*len(g.Proof.Hashes))
	b = append(b, `{"record":`...)
	b = append(b, g.Record...)
	b = append(b, `,"root_jws":"`...)
	b = append(b, g.RootJWS...)
	b = append(b, `","proof":{"index":`...)
	b = strconv.AppendInt(b, int64(g.Proof.Index), 10)
	b = append(b, `,"hashes":[`...)
	for i, h := range g.Proof.Hashes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, h...)
		b = append(b, '"')
	}
	return append(b, "]}}\n"...)
}

// signingFailed answers 500 signing_failed: no unsigned answer ever leaves.
func (s *Server) signingFailed(w http.ResponseWriter, err error) {
	s.signFailures.Inc()
	s.log.Error("pdp: signing failed", "err", err)
	guard.WriteHTTPError(w, ReasonSigningFailed, "")
}

// caller is the record's caller block for a request the middleware let
// through, and the mode. The guard counted any violation
// (pdp_auth_violations_total), let through under warn or not.
func (s *Server) caller(r *http.Request) (decision.Caller, string) {
	caller := decision.Caller{Authenticated: false, Reason: ReasonCallerAuthOff.String()}
	if v, ok := guard.FromContext(r.Context()); ok {
		caller = callerBlock(v, s.c.Callers.VerifiedBy())
	}
	return caller, s.c.Callers.ModeName()
}

// refuse answers a refused caller (the guard counted it), and logs the
// refusal in the decision log as it has room.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, v *guard.Verdict) {
	if s.dlog != nil {
		d := decisionlog.Decision{System: v.System, Reason: v.Reason.String(), Path: r.URL.Path, Status: guard.HTTPStatus(v.Reason.Code()), At: s.now()}
		if v.Caller != nil {
			d.Caller, d.Tenant = v.Caller.Username, v.Caller.Tenant
		}
		s.dlog.Refused(d)
	}
	guard.WriteRefusal(w, v)
}

// callerBlock is the record's caller: who asked, or, under warn, that the
// caller was not authenticated and what enforce would have said.
func callerBlock(v *guard.Verdict, verifiedBy string) decision.Caller {
	if !v.Reason.IsZero() || v.Caller == nil {
		return decision.Caller{Authenticated: false, Reason: v.Reason.String()}
	}
	c := v.Caller
	out := decision.Caller{Authenticated: true, Principal: c.Username, UID: c.UID, CredentialID: c.CredentialID,
		PodName: c.PodName, PodUID: c.PodUID, Audiences: c.Audiences, AuthenticatedBy: verifiedBy}
	if !c.IssuedAt.IsZero() {
		t := c.IssuedAt.UTC()
		out.TokenIssuedAt = &t
	}
	if !c.Expiry.IsZero() {
		t := c.Expiry.UTC()
		out.TokenExpiresAt = &t
	}
	return out
}

// responseBody is the check's answer, {"record": …, "record_jws": "…"},
// written once: the record is canonical JSON already and a compact JWS is
// base64url and dots, so there is nothing to re-encode
// (TestResponseBodyIsTheEncoding).
func responseBody(s *decision.Signed) []byte {
	b := make([]byte, 0, len(s.Record)+len(s.RecordJWS)+32)
	b = append(b, `{"record":`...)
	b = append(b, s.Record...)
	b = append(b, `,"record_jws":"`...)
	b = append(b, s.RecordJWS...)
	return append(b, "\"}\n"...)
}

// decodedBody is a body the guard's extractor has read and decoded: the
// handler takes the decoded request from it instead of decoding the same
// bytes again.
type decodedBody struct {
	io.ReadCloser
	req any // *policy.Request or *evaluationsRequest
}

// request is the check request: decoded once, by the extractor when there
// is one.
func (s *Server) request(r *http.Request) (*policy.Request, error) {
	if d, ok := r.Body.(*decodedBody); ok {
		if req, ok := d.req.(*policy.Request); ok {
			return req, nil
		}
	}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return decodeRequest(body)
}
