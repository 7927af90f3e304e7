package pdp

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

// EvaluationProfile is the format of the records that sign AuthZEN
// answers: one record per request, binding every evaluation in it through
// a Merkle root (decision.EvaluationRecord).
var EvaluationProfile = decision.Profile{Schema: "callerauth.authzen-evaluations.v3", Type: "callerauth-authzen+jwt"}

// The AuthZEN endpoints (Authorization API 1.0, HTTPS binding).
const (
	PathEvaluation    = "/access/v1/evaluation"
	PathEvaluations   = "/access/v1/evaluations"
	PathAuthZENConfig = "/.well-known/authzen-configuration"
)

// The evaluations semantics of AuthZEN §7.
const (
	ExecuteAll          = "execute_all"
	DenyOnFirstDeny     = "deny_on_first_deny"
	PermitOnFirstPermit = "permit_on_first_permit"
)

// MaxEvaluations bounds a batch.
const MaxEvaluations = 1000

var errTooMany = errors.New("too many evaluations")

// evaluationsRequest is a decoded AuthZEN request: one evaluation or a
// batch, defaults already applied to each item.
type evaluationsRequest struct {
	endpoint string // "evaluation" or "evaluations"
	batch    bool   // answered in the evaluations shape
	semantic string
	ignored  []string // request-level members not interpreted (foo, options.x, subject._note of a default)
	items    []evaluationItem
	budget   *ignoredBudget // what the request has ignored so far
}

// evaluationItem is one evaluation: the decoded 4-tuple, and its members'
// JSON as the request gave them (after defaults), which is what the record
// binds. An item of a batch that cannot be read is not a refusal of the
// batch: err says why, and its answer is a false decision with the error
// in its context (AuthZEN §7.2 Errors).
type evaluationItem struct {
	eval    policy.Evaluation
	raw     map[string]json.RawMessage // subject, action, resource, context
	prefix  string                     // "evaluations[2]." for a batch item's own members
	own     uint8                      // bit i: the item gave evaluationMembers[i] itself
	ignored []string
	err     error
	// prepared is the item read against the package's schema, to be
	// decided (policy.Batch.Decide).
	prepared policy.Prepared
}

// path names a member of the item as the request wrote it: its own, under
// the item's prefix, or a default, at the top level.
func (it *evaluationItem) path(rel string) string {
	member, _, _ := strings.Cut(rel, ".")
	if i := slices.Index(evaluationMembers, member); i >= 0 && it.own&(1<<i) != 0 {
		return it.prefix + rel
	}
	return rel
}

// memberDigests digests request members (decision.MemberDigest), each
// distinct JSON text once: a batch's defaults are shared by every item
// that does not replace them, and hashed once per request.
type memberDigests map[memberKey]string

type memberKey struct {
	p *byte
	n int
}

func (c memberDigests) of(v json.RawMessage) (string, error) {
	k := memberKey{&v[0], len(v)}
	if d, ok := c[k]; ok {
		return d, nil
	}
	d, err := decision.MemberDigest(v)
	if err != nil {
		return "", err
	}
	c[k] = d
	return d, nil
}

// requestDigest is the request_digest of the evaluation request an
// answer's leaf binds (decision.EvaluationRequestDigest): subject, action,
// resource and, when present, context — the item's own members where it
// has them, the batch's defaults where it does not, unknown members
// included (what was sent is what is bound; the leaf lists what was
// ignored), whether or not the item could be read.
func (it evaluationItem) requestDigest(c memberDigests) (string, error) {
	return decision.EvaluationRequestDigestWith(it.raw, c.of)
}

// evaluationMembers are the members of an evaluation request.
var evaluationMembers = []string{"subject", "action", "resource", "context"}

// sharedMember names each member for policy.Evaluation.Shared.
var sharedMember = map[string]policy.Members{"subject": policy.MemberSubject, "action": policy.MemberAction, "resource": policy.MemberResource, "context": policy.MemberContext}

// decodeEvaluations reads an AuthZEN request: I-JSON (a member twice,
// invalid UTF-8 and the like refused), the members the text defines read
// with their types, and every other member ignored (AuthZEN 1.0 §10.1.1:
// a receiver MUST ignore what it does not understand) and listed by path.
// What makes the whole request unreadable is an error naming the member
// by its path (400); in a batch, what makes one item unreadable is that
// item's error.
//
// With pb given, each item is read against the package's schema as it is
// decoded (policy.Batch.Prepare) and what the policy will not read joins
// what the request ignored: both count toward the request's bound as
// they are found, and a request past it is refused where it passes it,
// no later item read, none decided or signed.
func decodeEvaluations(body []byte, batch bool, requestID string, pb *policy.Batch) (*evaluationsRequest, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	req := &evaluationsRequest{endpoint: "evaluation", semantic: ExecuteAll}
	known := evaluationMembers
	if batch {
		req.endpoint = "evaluations"
		known = append(slices.Clone(known), "evaluations", "options")
	}
	top, err := object(body, "", known, &req.ignored)
	if err != nil {
		return nil, err
	}
	if v, ok := top["options"]; ok {
		opts, err := object(v, "options", []string{"evaluations_semantic"}, &req.ignored)
		if err != nil {
			return nil, err
		}
		if v, ok := opts["evaluations_semantic"]; ok {
			if req.semantic, err = str(v, "options.evaluations_semantic"); err != nil {
				return nil, err
			}
			if !slices.Contains([]string{ExecuteAll, DenyOnFirstDeny, PermitOnFirstPermit}, req.semantic) {
				return nil, badField("options.evaluations_semantic", "options.evaluations_semantic %q: want %s, %s or %s", guard.LogValue(req.semantic), ExecuteAll, DenyOnFirstDeny, PermitOnFirstPermit)
			}
		}
	}
	var list []json.RawMessage
	if raw, ok := top["evaluations"]; ok {
		err = ijson.Elements(raw, func(e []byte) error {
			if len(list) == MaxEvaluations {
				return errTooMany
			}
			list = append(list, e)
			return nil
		})
		if errors.Is(err, errTooMany) {
			return nil, badField("evaluations", "more than %d evaluations is over the limit: split the batch", MaxEvaluations)
		}
		if err != nil {
			return nil, badField("evaluations", "evaluations must be an array of objects")
		}
	}
	// The defaults, read once: one that cannot be read refuses the request.
	// What they ignore is the request's, recorded once in its record.
	defaults := &memberDefaults{raw: map[string]json.RawMessage{}}
	for _, k := range evaluationMembers {
		if v, ok := top[k]; ok {
			defaults.raw[k] = v
			if err := decodeMember(&defaults.eval, k, v, k, true, &req.ignored); err != nil {
				return nil, err
			}
		}
	}
	if err := recordIgnored(req.ignored); err != nil {
		return nil, err
	}
	if err := recordShare(req.ignored, requestID, len(list), len(body)+len(requestID)); err != nil {
		return nil, err
	}
	budget := newIgnoredBudget(body)
	if err := budget.take(req.ignored); err != nil {
		return nil, err
	}
	if len(list) == 0 {
		// No evaluations, or none in the array: the request is a single
		// evaluation (§7.1), answered as one (§6); a member missing refuses
		// it.
		it := decodeItem(nil, defaults, "")
		if it.err != nil {
			return nil, it.err
		}
		if err := it.prepare(pb, budget); err != nil {
			return nil, err
		}
		req.items = []evaluationItem{it}
		req.budget = budget
		return req, nil
	}
	req.batch = true
	for i, v := range list {
		prefix := fmt.Sprintf("evaluations[%d].", i)
		var ign []string
		own, err := object(v, strings.TrimSuffix(prefix, "."), evaluationMembers, &ign)
		if err != nil {
			return nil, err // not an object: the array is not one of evaluations
		}
		it := decodeItem(own, defaults, prefix)
		it.ignored = append(ign, it.ignored...)
		if err := budget.take(it.ignored); err != nil {
			return nil, err
		}
		if err := it.prepare(pb, budget); err != nil {
			return nil, err
		}
		req.items = append(req.items, it)
	}
	req.budget = budget
	return req, nil
}

// prepare reads a decodable item against the package's schema, adding
// what the policy will not read to its ignored and to the request's
// budget.
func (it *evaluationItem) prepare(pb *policy.Batch, budget *ignoredBudget) error {
	if pb == nil || it.err != nil {
		return nil
	}
	it.prepared = pb.Prepare(it.eval)
	own := len(it.ignored)
	for _, p := range it.prepared.Ignored {
		it.ignored = append(it.ignored, it.path(p))
	}
	return budget.take(it.ignored[own:])
}

// MaxIgnored bounds the members one request may have ignored — each
// listed by path in its record or answers — and the bytes of those paths
// may be at most twice the request's plus MaxIgnoredSlack: an answer
// cannot outgrow what was asked by more than a constant factor, however
// many items inherit a default the policy does not read.
const (
	MaxIgnored      = 16 * MaxEvaluations
	MaxIgnoredSlack = 64 << 10
)

// MaxRecordIgnored and MaxRecordIgnoredBytes bound the request-level
// members ignored — the record's "ignored", which every answer of a batch
// carries in its record: a record of bounded size keeps a batch's answers
// linear in its items.
const (
	MaxRecordIgnored      = 100
	MaxRecordIgnoredBytes = 4 << 10
)

// recordIgnored refuses request-level ignored members past the record's
// bounds.
func recordIgnored(paths []string) error {
	n := 0
	for _, p := range paths {
		n += len(p)
	}
	switch {
	case len(paths) > MaxRecordIgnored:
		return badField("body", "the request has %d members the pdp does not interpret at its top level or in its defaults; at most %d are accepted (each is listed in the record every answer carries)", len(paths), MaxRecordIgnored)
	case n > MaxRecordIgnoredBytes:
		return badField("body", "the members the pdp does not interpret at the request's top level or in its defaults have paths of %d bytes; at most %d are accepted (each is listed in the record every answer carries)", n, MaxRecordIgnoredBytes)
	}
	return nil
}

// RecordShareFactor bounds what the answers of a batch repeat of their
// request: every answer carries the batch's record, which lists the
// request-level members ignored and the X-Request-ID, so those bytes
// (as the record writes them) times the batch's items may come to at
// most RecordShareFactor times the request's bytes (body and
// X-Request-ID). A batch of 1,000 minimal items may so carry a record
// share of about a hundred bytes: a UUID X-Request-ID and two or three
// ignored members.
const RecordShareFactor = 32

// recordShare refuses a batch whose items would repeat more of the
// request than RecordShareFactor allows; it is decided before any item
// is read.
func recordShare(ignored []string, requestID string, items, asked int) error {
	if items < 2 {
		return nil // one answer carries the record once
	}
	share := decision.QuotedLen(requestID)
	for _, p := range ignored {
		share += decision.QuotedLen(p) + 1
	}
	if items*share > RecordShareFactor*asked {
		return badField("body", "the record each of the batch's %d answers carries repeats %d bytes of this request (its X-Request-ID and the %d members the pdp does not interpret at its top level or in its defaults); %d answers may repeat at most %d times the request's %d bytes: send a shorter X-Request-ID or fewer uninterpreted members, or split the batch", items, share, len(ignored), items, RecordShareFactor, asked)
	}
	return nil
}

// ignoredBudget counts what a request has ignored so far, each path by
// the bytes it costs the answer that lists it (quoted, and a comma).
type ignoredBudget struct{ n, bytes, maxBytes int }

func newIgnoredBudget(body []byte) *ignoredBudget {
	return &ignoredBudget{maxBytes: 2*len(body) + MaxIgnoredSlack}
}

// take counts paths, or refuses the request when they pass a limit.
func (b *ignoredBudget) take(paths []string) error {
	for _, p := range paths {
		b.n++
		b.bytes += decision.QuotedLen(p) + 1
	}
	switch {
	case b.n > MaxIgnored:
		return badField("body", "the request has more than %d members the pdp does not interpret (the limit: each is listed in the answer); send only what the API and the policy define", MaxIgnored)
	case b.bytes > b.maxBytes:
		return badField("body", "the paths of the members the pdp does not interpret come to more than %d bytes, twice the request's plus %d (the limit: each is listed in the answer); send only what the API and the policy define", b.maxBytes, MaxIgnoredSlack)
	}
	return nil
}

// memberDefaults are a request's top-level members, read once: their
// JSON and what they decode to.
type memberDefaults struct {
	raw  map[string]json.RawMessage
	eval policy.Evaluation
}

// inherit copies the default member k into e.
func (d *memberDefaults) inherit(e *policy.Evaluation, k string) {
	switch k {
	case "subject":
		e.Subject = d.eval.Subject
	case "resource":
		e.Resource = d.eval.Resource
	case "action":
		e.Action, e.ActionProperties = d.eval.Action, d.eval.ActionProperties
	case "context":
		e.Context = d.eval.Context
	}
}

// checkBody refuses a body that is not I-JSON, naming the member where it
// can.
func checkBody(body []byte) error {
	if err := ijson.Check(body); err != nil {
		var e *ijson.Error
		if errors.As(err, &e) && e.Member() != "" {
			return badField(e.Member(), "member %q: %s", e.Member(), e.Problem)
		}
		return badField("body", "body is not a JSON object: %v", err)
	}
	return nil
}

// decodeItem reads one evaluation: its own members, each replacing the
// default whole (AuthZEN §7.1.1). A member missing or unreadable is the
// item's error.
func decodeItem(own map[string]json.RawMessage, defaults *memberDefaults, prefix string) evaluationItem {
	it := evaluationItem{raw: make(map[string]json.RawMessage, len(evaluationMembers)), prefix: prefix}
	// What the item binds is every member it has, its own or a default's,
	// whether or not it can be read: an answer that cannot be read still
	// verifies against the request that asked it.
	for i, k := range evaluationMembers {
		if v, ok := own[k]; ok {
			it.own |= 1 << i
			it.raw[k] = v
		} else if v, ok := defaults.raw[k]; ok {
			it.raw[k] = v
		}
	}
	for i, k := range evaluationMembers {
		v, ok := it.raw[k]
		switch {
		case !ok && k == "context":
		case !ok:
			it.err = badField(prefix+k, "%s is required", prefix+k)
			return it
		case it.own&(1<<i) != 0:
			if err := decodeMember(&it.eval, k, v, prefix+k, true, &it.ignored); err != nil {
				it.err = err
				return it
			}
		default:
			// A default's ignored members are the request's, recorded
			// once (decodeEvaluations), never once per item; the policy
			// converts it once for the batch.
			defaults.inherit(&it.eval, k)
			it.eval.Shared |= sharedMember[k]
		}
	}
	return it
}

// decodeMember reads one member of an evaluation into e. needID: an
// entity must name its id (a search's target need not).
func decodeMember(e *policy.Evaluation, k string, v json.RawMessage, path string, needID bool, ignored *[]string) error {
	var err error
	switch k {
	case "subject":
		e.Subject, err = decodeEntity(v, path, needID, ignored)
	case "resource":
		e.Resource, err = decodeEntity(v, path, needID, ignored)
	case "action":
		var m map[string]json.RawMessage
		if m, err = object(v, path, []string{"name", "properties"}, ignored); err == nil {
			if e.Action, err = required(m, path, "name"); err == nil {
				e.ActionProperties, err = props(m, path, ignored)
			}
		}
	case "context":
		if string(v) == "null" {
			*ignored = append(*ignored, path)
			return nil
		}
		if _, err = object(v, path, nil, nil); err == nil {
			e.Context = v
		}
	}
	return err
}

func decodeEntity(v json.RawMessage, path string, needID bool, ignored *[]string) (policy.Entity, error) {
	var e policy.Entity
	m, err := object(v, path, []string{"type", "id", "properties"}, ignored)
	if err != nil {
		return e, err
	}
	if e.Type, err = required(m, path, "type"); err != nil {
		return e, err
	}
	if _, ok := m["id"]; ok || needID {
		if e.ID, err = required(m, path, "id"); err != nil {
			return e, err
		}
	}
	e.Properties, err = props(m, path, ignored)
	return e, err
}

// object reads a JSON object. With known given, members not among them
// are listed in ignored by path (nil known: every member is taken).
func object(v json.RawMessage, path string, known []string, ignored *[]string) (map[string]json.RawMessage, error) {
	name := path
	if name == "" {
		name = "body"
	}
	if len(v) == 0 || v[0] != '{' {
		return nil, badField(name, "%s must be a JSON object", name)
	}
	m := map[string]json.RawMessage{}
	err := ijson.Members(v, func(k, value []byte) error {
		if known != nil && !slices.Contains(known, string(k)) {
			member := string(k)
			if path != "" {
				member = path + "." + member
			}
			*ignored = append(*ignored, member)
			return nil
		}
		m[string(k)] = value
		return nil
	})
	if err != nil {
		return nil, badField(name, "%s must be a JSON object", name)
	}
	return m, nil
}

func str(v json.RawMessage, path string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && bytes.IndexByte(v, '\\') < 0 {
		// No escape: the checked body's bytes between the quotes are the
		// string (valid UTF-8, no control character: ijson.Check saw to it).
		return string(v[1 : len(v)-1]), nil
	}
	var s string
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", badField(path, "%s must be a string", path)
	}
	return s, nil
}

func required(m map[string]json.RawMessage, path, key string) (string, error) {
	v, ok := m[key]
	if !ok {
		return "", badField(path+"."+key, "%s.%s is required", path, key)
	}
	s, err := str(v, path+"."+key)
	if err == nil && s == "" {
		return "", badField(path+"."+key, "%s.%s may not be empty", path, key)
	}
	return s, err
}

// props reads an entity's or action's properties: an object, or null
// (taken as absent, and listed as ignored).
func props(m map[string]json.RawMessage, path string, ignored *[]string) (json.RawMessage, error) {
	v, ok := m["properties"]
	if !ok {
		return nil, nil
	}
	if string(v) == "null" {
		*ignored = append(*ignored, path+".properties")
		return nil, nil
	}
	if _, err := object(v, path+".properties", nil, nil); err != nil {
		return nil, err
	}
	return v, nil
}

// authzenExtract names what an AuthZEN caller speaks for — the policy
// package's id, bound to its principal by --caller-binding — without
// reading the body: the guard decides who may ask before anything they
// ask is read, so a caller it refuses costs no decoding.
func (s *Server) authzenExtract(path string) func(r *http.Request) (binding.Request, error) {
	return func(*http.Request) (binding.Request, error) {
		return binding.Request{System: s.state.Get().pkg.ID, Method: "POST " + path}, nil
	}
}

// readDecoded reads an AuthZEN request's body (bounded) and decodes it,
// once the guard has let the caller through.
func readDecoded[T any](r *http.Request, s *Server, decode func([]byte) (T, error)) (T, error) {
	var zero T
	if n := len(requestID(r)); n > MaxRequestIDBytes {
		return zero, badField(HeaderRequestID, "%s is %d bytes; at most %d are accepted (the record every answer carries binds it)", HeaderRequestID, n, MaxRequestIDBytes)
	}
	body, err := s.readAuthZENBody(r)
	if err != nil {
		return zero, err
	}
	return decode(body)
}

// MaxRequestIDBytes bounds the X-Request-ID an AuthZEN request may carry
// (its values joined): the record binds it, and every answer of a batch
// carries the record.
const MaxRequestIDBytes = 1024

// HeaderRequestID is the AuthZEN request identifier (§10.1.3).
const HeaderRequestID = "X-Request-ID"

// echoRequestID answers every response of the pdp's API — a decision, a
// refusal, a bad request, a 404 or 405 — with the X-Request-ID the
// request carried, as the text requires of a PDP (§10.1.3: "MUST include
// the same identifier"). The header is bounded by the server's header
// limit; a request whose headers pass it is answered 431 by Go's HTTP
// server before any handler, without it.
func echoRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ids := r.Header.Values(HeaderRequestID); len(ids) > 0 {
			w.Header()[http.CanonicalHeaderKey(HeaderRequestID)] = slices.Clone(ids)
		}
		h.ServeHTTP(w, r)
	})
}

// authzenHandler serves one of the two evaluation endpoints through the
// same caller authentication as /v1/check.
func (s *Server) authzenHandler(path string) http.Handler {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.evaluate(w, r, path) })
	return s.guarded(s.authzenExtract(path), s.withinShare(h), s.azLatency.WithLabelValues(path))
}

// evaluationAnswer is one AuthZEN answer.
type evaluationAnswer struct {
	Decision bool                    `json:"decision"`
	Context  evaluationAnswerContext `json:"context"`
}

type evaluationAnswerContext struct {
	Error *evaluationError         `json:"error,omitempty"`
	Proof decision.EvaluationProof `json:"callerauth"`
}

// evaluationError is an item's error, as AuthZEN §7.2 shows it.
type evaluationError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// requestID is the X-Request-ID a request carried, as its record binds it:
// several values joined as one HTTP list.
func requestID(r *http.Request) string {
	return strings.Join(r.Header.Values(HeaderRequestID), ", ")
}

// evaluate decides every evaluation of a request (as its semantic says),
// signs them once and answers.
func (s *Server) evaluate(w http.ResponseWriter, r *http.Request, path string) {
	st := s.state.Get() // one snapshot: policy, registry and signers
	if st.pkg.API != policy.APIAuthZEN {
		guard.WriteHTTPError(w, ReasonAPINotServed, fmt.Sprintf("policy package %s serves POST /v1/check, not AuthZEN", st.pkg.ID))
		return
	}
	batch := st.pkg.NewBatch(st.reg)
	req, err := readDecoded(r, s, func(body []byte) (*evaluationsRequest, error) {
		return decodeEvaluations(body, path == PathEvaluations, requestID(r), batch)
	})
	if err != nil {
		badRequest(w, r, err)
		return
	}
	caller, mode := s.caller(r)
	var leaves []decision.EvaluationLeaf
	var answers []evaluationAnswer
	digests := memberDigests{}
	_, espan := spans.Start(r.Context(), tracerName, "pdp.evaluate")
	defer espan.End() // a request given up part way
	for i := range req.items {
		if r.Context().Err() != nil {
			// The client went away: nothing more is evaluated or signed,
			// as a search page stops.
			return
		}
		it := &req.items[i]
		var d policy.Decision
		if it.err != nil {
			d = policy.Decision{Reason: policy.ReasonInvalidEvaluation, Invalid: true, Detail: it.err.Error()}
		} else {
			d = batch.Decide(&it.prepared)
		}
		ignored := it.ignored
		digest, err := it.requestDigest(digests)
		if err != nil {
			s.log.Error("pdp: binding an evaluation failed", "err", err, "index", i)
			guard.WriteHTTPError(w, ReasonRecordFailed, "")
			return
		}
		a := evaluationAnswer{Decision: d.Allow}
		contextDigest := decision.EmptyContextDigest
		if d.Invalid {
			a.Context.Error = &evaluationError{Status: http.StatusBadRequest, Message: d.Detail}
			eb, _ := json.Marshal(a.Context.Error)
			if contextDigest, err = decision.ContextDigest(map[string]json.RawMessage{"error": eb}); err != nil {
				s.signingFailed(w, err)
				return
			}
		}
		if d.Detail != "" {
			s.log.Info("pdp: evaluation denied before policy", "reason", d.Reason, "index", i, "detail", guard.LogValue(d.Detail))
		}
		leaves = append(leaves, decision.EvaluationLeaf{Index: i, RequestDigest: digest, Decision: d.Allow, Reason: d.Reason,
			ContextDigest: contextDigest, Ignored: ignored})
		answers = append(answers, a)
		s.evaluations.WithLabelValues(strconvBool(d.Allow), d.Reason).Inc()
		if (req.semantic == DenyOnFirstDeny && !d.Allow) || (req.semantic == PermitOnFirstPermit && d.Allow) {
			break
		}
	}
	if espan.IsRecording() {
		espan.SetAttributes(attribute.Int("pdp.evaluations", len(leaves)))
		if len(leaves) == 1 {
			espan.SetAttributes(attribute.Bool("callerauth.allowed", leaves[0].Decision), attribute.String("callerauth.reason", leaves[0].Reason))
		}
	}
	espan.End()
	rec := &decision.EvaluationRecord{DecisionID: uuid.NewString(), PolicyVersion: st.pkg.Version, Caller: caller,
		Endpoint: req.endpoint, Semantic: req.semantic, Requested: len(req.items), RequestID: requestID(r), Ignored: req.ignored,
		Provenance: decision.Provenance{Evaluator: policy.Evaluator, Mode: mode, PolicyPackageID: st.pkg.ID,
			PolicyPackageDigest: st.pkg.Digest, RegistrySnapshotDigest: st.reg.Digest, DecidedAt: s.now().UTC()}}
	sign := st.evalSigner.SignEvaluations
	if st.evalGroup != nil && !req.batch {
		// One answer: its record shares a signature with the single
		// evaluations that arrive while one is being made, as checks do.
		sign = st.evalGroup.SignEvaluations
	}
	_, sspan := spans.Start(r.Context(), tracerName, "pdp.sign")
	_, proofs, err := sign(rec, leaves)
	sspan.End()
	if err != nil {
		s.signingFailed(w, err)
		return
	}
	for i := range answers {
		answers[i].Context.Proof = proofs[i]
	}
	var b bytes.Buffer
	b.Grow(len(answers) * (len(proofs[0].RecordJWS) + 256))
	if req.batch {
		b.WriteString(`{"evaluations":[`)
	}
	for i := range answers {
		if i > 0 {
			b.WriteByte(',')
		}
		answers[i].appendJSON(&b)
	}
	if req.batch {
		b.WriteString("]}")
	}
	b.WriteByte('\n')
	// The log's allowed is the answer's decision: for a batch, whether
	// every evaluation answered allows; its reason is a single one's.
	allowed, why := true, ""
	for i := range answers {
		allowed = allowed && answers[i].Decision
	}
	if !req.batch && len(leaves) == 1 {
		why = leaves[0].Reason
	}
	if !s.keep(w, r, allowed, why, b.Bytes()) {
		return
	}
	writeBody(w, r, b.Bytes())
}

// appendJSON writes the answer as encoding/json would (TestAnswerJSON),
// without its reflection: a batch's answers repeat one JWS, which needs
// no escaping (base64url and dots), and are written once per item.
func (a *evaluationAnswer) appendJSON(b *bytes.Buffer) {
	b.WriteString(`{"decision":`)
	b.WriteString(strconv.FormatBool(a.Decision))
	b.WriteString(`,"context":{`)
	if e := a.Context.Error; e != nil {
		b.WriteString(`"error":{"status":`)
		b.WriteString(strconv.Itoa(e.Status))
		b.WriteString(`,"message":`)
		decision.WriteString(b, e.Message)
		b.WriteString(`},`)
	}
	p := &a.Context.Proof
	b.WriteString(`"callerauth":{`)
	if p.RecordJWS != "" {
		b.WriteString(`"record_jws":"`)
		b.WriteString(p.RecordJWS)
		b.WriteString(`",`)
	} else {
		// Group-signed: the record (canonical JSON already), the root's
		// JWS and the record's proof under it.
		b.WriteString(`"record":`)
		b.Write(p.Record)
		b.WriteString(`,"root_jws":"`)
		b.WriteString(p.RootJWS)
		b.WriteString(`","record_proof":{"index":`)
		b.WriteString(strconv.Itoa(p.RecordProof.Index))
		b.WriteString(`,"hashes":`)
		writeHashes(b, p.RecordProof.Hashes)
		b.WriteString(`},`)
	}
	b.WriteString(`"index":`)
	b.WriteString(strconv.Itoa(p.Index))
	b.WriteString(`,"request_digest":"`)
	b.WriteString(p.RequestDigest)
	b.WriteString(`","reason":`)
	decision.WriteString(b, p.Reason)
	b.WriteString(`,"ignored":[`)
	for i, s := range p.Ignored {
		if i > 0 {
			b.WriteByte(',')
		}
		decision.WriteString(b, s)
	}
	b.WriteString(`],"proof":`)
	writeHashes(b, p.Proof)
	b.WriteString("}}}")
}

// writeHashes writes base64url hashes as a JSON array: none needs
// escaping.
func writeHashes(b *bytes.Buffer, hashes []string) {
	b.WriteByte('[')
	for i, h := range hashes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(h)
		b.WriteByte('"')
	}
	b.WriteByte(']')
}

// GzipAbove is the answer size from which an AuthZEN answer is sent
// gzip-compressed to a client that accepts it: every item of a batch
// carries the batch's one record JWS, so that it verifies on its own, and
// those repeat.
const GzipAbove = 64 << 10

// writeBody sends a JSON body, gzip-compressed when it is larger than
// GzipAbove and the request accepts gzip.
func writeBody(w http.ResponseWriter, r *http.Request, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	if len(b) <= GzipAbove || !acceptsGzip(r) {
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Add("Vary", "Accept-Encoding")
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	_, _ = zw.Write(b)
	_ = zw.Close()
}

// acceptsGzip reads Accept-Encoding (RFC 9110 §12.5.3): gzip listed
// without q=0.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

func strconvBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// MetadataProfile types the JWT of the AuthZEN metadata's signed_metadata
// (signed by the decision key, so that one JWKS verifies both).
var MetadataProfile = decision.Profile{Schema: "authzen-metadata", Type: "authzen-metadata+jwt"}

// authzenConfig serves the PDP metadata (AuthZEN §9): the identifier, the
// evaluation and search endpoints, the JWKS of the keys that sign answers,
// and the same as a JWT signed by the decision key (signed_metadata). The
// identifier is never taken from the request (a Host header would make it
// whatever the caller says, defeating the check it exists for):
// --authzen-base-url, or the serving certificate's first name and the
// port served on; over plain HTTP there is none, and no metadata. The
// tenant-suffixed document (/.well-known/authzen-configuration/<package
// id>) names the identifier <base>/<package id>, whose endpoints the pdp
// serves under that path. capabilities is omitted: it lists registered
// capability URNs, none is registered, and a parameter without values
// MUST be omitted (§9.2.2).
func (s *Server) authzenConfig(w http.ResponseWriter, r *http.Request) {
	st := s.state.Get()
	if st.pkg.API != policy.APIAuthZEN {
		guard.WriteHTTPError(w, ReasonAPINotServed, "this PDP's policy package does not serve AuthZEN")
		return
	}
	root, err := s.pdpIdentifier()
	if err != nil {
		guard.WriteHTTPError(w, ReasonNoPDPIdentifier, err.Error())
		return
	}
	base := root
	if tenant := r.PathValue("tenant"); tenant != "" {
		if tenant != st.pkg.ID {
			guard.WriteHTTPError(w, ReasonUnknownTenant, fmt.Sprintf("this PDP serves policy package %s; no metadata for %q", st.pkg.ID, guard.LogValue(tenant)))
			return
		}
		base = root + "/" + url.PathEscape(tenant)
	}
	meta := map[string]any{
		"policy_decision_point":       base,
		"access_evaluation_endpoint":  base + PathEvaluation,
		"access_evaluations_endpoint": base + PathEvaluations,
		"search_subject_endpoint":     base + PathSearchSubject,
		"search_resource_endpoint":    base + PathSearchResource,
		"search_action_endpoint":      base + PathSearchAction,
		"jwks_uri":                    root + PathJWKS,
	}
	claims := maps.Clone(meta)
	claims["iss"] = base
	claims["iat"] = s.now().Unix()
	signed, err := st.metaSigner.SignClaims(claims)
	if err != nil {
		s.signingFailed(w, err)
		return
	}
	meta["signed_metadata"] = signed
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_ = json.NewEncoder(w).Encode(meta)
}

// inTenant serves h under /<package id>/: the endpoints the
// tenant-suffixed metadata names.
func (s *Server) inTenant(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := s.state.Get().pkg.ID; r.PathValue("tenant") != id {
			guard.WriteHTTPError(w, ReasonUnknownTenant, fmt.Sprintf("this PDP serves policy package %s", id))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// pdpIdentifier is the https URL the metadata names as this PDP.
func (s *Server) pdpIdentifier() (string, error) {
	if s.c.AuthZENBaseURL != "" {
		return strings.TrimSuffix(s.c.AuthZENBaseURL, "/"), nil
	}
	cfg := s.m.TLSConfig()
	if s.c.InsecureHTTP || cfg == nil {
		return "", errors.New("this PDP serves plain HTTP, so it has no AuthZEN identifier (an https URL, AuthZEN 1.0 §9): set --authzen-base-url to the https URL a TLS proxy serves it at")
	}
	port := s.port.Load()
	cert, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || cert == nil || len(cert.Certificate) == 0 || port == 0 {
		return "", errors.New("the serving certificate is not loaded yet; set --authzen-base-url to name this PDP")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return "", fmt.Errorf("the serving certificate: %w", err)
	}
	var host string
	switch {
	case len(leaf.DNSNames) > 0:
		host = leaf.DNSNames[0]
	case len(leaf.IPAddresses) > 0:
		host = leaf.IPAddresses[0].String()
	default:
		return "", errors.New("the serving certificate names no host; set --authzen-base-url to name this PDP")
	}
	hostport := net.JoinHostPort(host, strconv.Itoa(int(port)))
	if port == 443 {
		hostport = strings.TrimSuffix(hostport, ":443")
	}
	return "https://" + hostport, nil
}
