package guard

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/reason"
)

// ErrorDomain is the ErrorInfo domain of callerauth refusals.
const ErrorDomain = "callerauth.dev"

// transports is how each refusal code travels: its gRPC code and HTTP
// status.
var transports = map[reason.Code]struct {
	grpc codes.Code
	http int
}{
	reason.Unauthenticated:    {codes.Unauthenticated, http.StatusUnauthorized},
	reason.PermissionDenied:   {codes.PermissionDenied, http.StatusForbidden},
	reason.Unavailable:        {codes.Unavailable, http.StatusServiceUnavailable},
	reason.InvalidArgument:    {codes.InvalidArgument, http.StatusBadRequest},
	reason.NotFound:           {codes.NotFound, http.StatusNotFound},
	reason.FailedPrecondition: {codes.FailedPrecondition, http.StatusConflict},
	reason.ResourceExhausted:  {codes.ResourceExhausted, http.StatusTooManyRequests},
	reason.Internal:           {codes.Internal, http.StatusInternalServerError},
}

// GRPCCode maps a refusal code to a gRPC code (OK for no refusal).
func GRPCCode(c reason.Code) codes.Code {
	if t, ok := transports[c]; ok {
		return t.grpc
	}
	return codes.OK
}

// HTTPStatus maps a refusal code to an HTTP status (200 for no refusal).
func HTTPStatus(c reason.Code) int {
	if t, ok := transports[c]; ok {
		return t.http
	}
	return http.StatusOK
}

// Status returns the gRPC status of a refused verdict: the code, the reason
// as message, and an ErrorInfo detail carrying the reason and the
// violation's metadata (the role a method requires). Nothing else — not the
// token, not the detail — reaches the caller.
func (v *Verdict) Status() *status.Status {
	st := status.New(GRPCCode(v.Reason.Code()), v.Reason.String())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: v.Reason.String(), Domain: ErrorDomain, Metadata: v.Metadata}); err == nil {
		return d
	}
	return st
}

// Refuse is a service's own refusal over gRPC, shaped as the guard's are:
// the reason's code, msg as the message (the reason's sentence when msg is
// empty), and an ErrorInfo carrying the reason. Every refusal a service
// sends over gRPC is made here or by [Verdict.Status]: each carries a
// declared reason.
func Refuse(r reason.Reason, msg string) error {
	st := status.New(GRPCCode(r.Code()), cmp.Or(msg, r.Sentence()))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: r.String(), Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// GRPCRequest extracts what a gRPC request asks to say. The method is
// filled in by the interceptor; an extractor sets System and Nodes from
// the message. A nil extractor judges the method alone.
type GRPCRequest func(ctx context.Context, method string, msg any) (binding.Request, error)

// UnaryServerInterceptor guards unary RPCs.
func (g *Guard) UnaryServerInterceptor(extract GRPCRequest) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, msg any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		req := binding.Request{Method: info.FullMethod}
		if extract != nil {
			r, err := extract(ctx, info.FullMethod, msg)
			if err != nil {
				return nil, Refuse(ReasonBadRequest, err.Error())
			}
			r.Method = info.FullMethod
			req = r
		}
		v := g.Check(ctx, bearer.FromIncomingContext(ctx), req)
		if !v.Allowed {
			return nil, v.Status().Err()
		}
		return handler(NewContext(ctx, v), msg)
	}
}

// StreamServerInterceptor guards streaming RPCs at the start of the stream,
// on the method alone.
func (g *Guard) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		v := g.Check(ss.Context(), bearer.FromIncomingContext(ss.Context()), binding.Request{Method: info.FullMethod})
		if !v.Allowed {
			return v.Status().Err()
		}
		return handler(srv, &guardedStream{ServerStream: ss, ctx: NewContext(ss.Context(), v)})
	}
}

type guardedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *guardedStream) Context() context.Context { return s.ctx }

// HTTPRequest extracts what an HTTP request asks to say. It may read the
// body, but must leave it readable for the handler. A nil extractor judges
// the method and path alone.
type HTTPRequest func(r *http.Request) (binding.Request, error)

// MiddlewareOption shapes [Guard.Middleware].
type MiddlewareOption func(*middleware)

type middleware struct {
	requireIdentity bool
	peer            func(*http.Request) (*authn.Caller, error)
	refuse          func(http.ResponseWriter, *http.Request, *Verdict)
	badRequest      func(http.ResponseWriter, *http.Request, error)
}

// RequireIdentity says that every caller of this handler must present a
// token: a request without one is token_missing whatever the rules say.
// With it, under enforce, a request whose credential proves no identity
// is refused from its header alone — the extractor never runs, so the body
// is never read and an unauthenticated client learns nothing about the
// request format.
func RequireIdentity() MiddlewareOption { return func(m *middleware) { m.requireIdentity = true } }

// WithPeerIdentity identifies a request that presents no bearer token
// by its transport: peer returns the caller a verified client
// certificate names (callerauth-proxy's --client-ca-file), nil when the
// request proves none, or an error (reason from [authn.ReasonOf]) for one
// that cannot be accepted. A request with a token is judged by its token.
func WithPeerIdentity(peer func(*http.Request) (*authn.Caller, error)) MiddlewareOption {
	return func(m *middleware) { m.peer = peer }
}

// WithRefusal answers refused requests instead of [WriteRefusal] (which it
// may call after adding what the service needs).
func WithRefusal(f func(http.ResponseWriter, *http.Request, *Verdict)) MiddlewareOption {
	return func(m *middleware) { m.refuse = f }
}

// WithBadRequest answers requests the extractor could not read instead of
// a 400 {"reason": "bad_request", "error": err}.
func WithBadRequest(f func(http.ResponseWriter, *http.Request, error)) MiddlewareOption {
	return func(m *middleware) { m.badRequest = f }
}

// Middleware guards an HTTP handler: authenticate the credential, extract
// what the request asks to say, decide, and call next with the verdict in
// the request context ([FromContext]). A refusal is answered as
// [WriteRefusal] answers it unless [WithRefusal] says otherwise.
func (g *Guard) Middleware(extract HTTPRequest, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := middleware{
		refuse: func(w http.ResponseWriter, _ *http.Request, v *Verdict) { WriteRefusal(w, v) },
		badRequest: func(w http.ResponseWriter, _ *http.Request, err error) {
			WriteHTTPError(w, ReasonBadRequest, err.Error())
		},
	}
	for _, o := range opts {
		o(&m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d := new(decided) // the authentication and the verdict, one allocation
			a := &d.a
			g.authenticate(r.Context(), bearer.FromHeader(r.Header), a)
			if a.absent && m.peer != nil {
				if c, err := m.peer(r); err != nil {
					a.absent, a.err = false, err
					a.viol = &binding.Violation{Reason: authn.ReasonOf(err), Detail: err.Error()}
				} else if c != nil {
					a.absent, a.subject.Caller = false, c
				}
			}
			if m.requireIdentity && a.absent {
				a.viol = &binding.Violation{Reason: binding.ReasonTokenMissing, Detail: "no token; this handler requires one"}
			}
			if g.cfg.Mode == Enforce && a.viol != nil && !a.degraded && m.requireIdentity {
				unread := closing(w, r)
				m.refuse(w, r, g.decide(r.Context(), a, binding.Request{Method: httpMethod(r)}, &d.v))
				closeUnread(w, unread)
				return
			}
			var req binding.Request
			if extract != nil {
				x, err := extract(r)
				if err != nil {
					unread := closing(w, r)
					m.badRequest(w, r, err)
					closeUnread(w, unread)
					return
				}
				req = x
			}
			if req.Method == "" {
				req.Method = httpMethod(r)
			}
			v := g.decide(r.Context(), a, req, &d.v)
			if !v.Allowed {
				unread := closing(w, r)
				m.refuse(w, r, v)
				closeUnread(w, unread)
				return
			}
			next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), v)))
		})
	}
}

// closing prepares the refusal of an HTTP/1.x request whose body may
// still be on its way (it has one, and the refusal read none or part of
// it): the answer says Connection: close, so that net/http sends it at
// once instead of first reading and discarding up to 256 KiB of a body
// that may be trickling in — until the read timeout, for a slow client.
// Over HTTP/2 the handler's return resets the stream: nothing to do.
func closing(w http.ResponseWriter, r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	w.Header().Set("Connection", "close")
	return true
}

// Lingering after a refusal closes its connection: what of the body
// still arrives is read and dropped for at most this long and this much
// (closing with data unread would reset the connection, and the client
// could lose the answer), off the handler.
const (
	lingerTimeout = 2 * time.Second
	lingerBytes   = 256 << 10
)

// closeUnread ends the connection of a refusal closing prepared: the
// answer, whose length is known, flushed, the connection closed for
// writing (the client reads the answer and its end now), and what
// follows of the body drained, bounded, before it is closed whole. An
// answer of unknown length is left to net/http, which closes the
// connection after it.
func closeUnread(w http.ResponseWriter, unread bool) {
	if !unread || w.Header().Get("Content-Length") == "" {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	conn, _, err := rc.Hijack()
	if err != nil {
		return // not a connection of net/http's (a recorder, a wrapper)
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	go func() {
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(lingerTimeout))
		_, _ = io.CopyN(io.Discard, conn, lingerBytes)
	}()
}

// httpMethod is a request's method as the rules name it, "VERB /path":
// built only when the extractor names none (one string per request saved).
func httpMethod(r *http.Request) string { return r.Method + " " + r.URL.Path }

// ReasonBadRequest is the reason of a request the service could not read.
var ReasonBadRequest = reason.New("bad_request", reason.InvalidArgument, "the request could not be read")

// WriteRefusal answers a refused verdict over HTTP: 401, 403 or 503, and
// the JSON body {"reason": "<reason>", "error": "<sentence>"} — the stable
// reason for programs, the sentence for people, and nothing else (not the
// token, not the detail). A 401 carries WWW-Authenticate: Bearer, as
// RFC 6750 §3.1 has it: no error code for a request that sent no
// credentials, invalid_request for a malformed Authorization header,
// invalid_token otherwise.
func WriteRefusal(w http.ResponseWriter, v *Verdict) {
	if v.Reason.Code() == reason.Unauthenticated {
		w.Header().Set("WWW-Authenticate", challenge(v.Reason))
	}
	WriteHTTPError(w, v.Reason, "")
}

// challenge is a 401's WWW-Authenticate for reason r.
func challenge(r reason.Reason) string {
	switch r {
	case binding.ReasonTokenMissing:
		return "Bearer"
	case bearer.ReasonMalformed:
		return `Bearer error="invalid_request"`
	}
	return `Bearer error="invalid_token"`
}

// WriteHTTPError writes a refusal: the HTTP status of r's code and the
// JSON body {"reason": r, "error": msg}, msg being r's sentence when
// empty, with extra members (such as "field") beside them. Every refusal
// a service sends over HTTP is written here: each carries a declared
// reason.
func WriteHTTPError(w http.ResponseWriter, r reason.Reason, msg string, extra ...string) {
	body := map[string]string{"reason": r.String(), "error": cmp.Or(msg, r.Sentence())}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i]] = extra[i+1]
	}
	b, _ := json.Marshal(body)
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(HTTPStatus(r.Code()))
	_, _ = w.Write(b)
}
