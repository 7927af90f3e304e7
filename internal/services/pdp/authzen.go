package pdp

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

// EvaluationProfile is the format of the records that sign AuthZEN
// answers: one record per request, binding every evaluation in it through
// a Merkle root (decision.EvaluationRecord).
var EvaluationProfile = decision.Profile{Schema: "callerauth.authzen-evaluations.v1", Type: "callerauth-authzen+jwt"}

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

// evaluationsRequest is a decoded AuthZEN request: one evaluation (no
// Items) or a batch, defaults already applied to each item.
type evaluationsRequest struct {
	batch    bool
	semantic string
	items    []evaluationItem
}

// evaluationItem is one evaluation: the decoded 4-tuple, and its members'
// JSON as the request gave them (after defaults), which is what the record
// binds.
type evaluationItem struct {
	eval policy.Evaluation
	raw  map[string]json.RawMessage // subject, action, resource, context
}

// canonicalMembers canonicalizes request members, each distinct JSON text
// once: a batch's defaults are shared by every item that does not replace
// them.
type canonicalMembers map[memberKey][]byte

type memberKey struct {
	p *byte
	n int
}

func (c canonicalMembers) of(v json.RawMessage) ([]byte, error) {
	k := memberKey{&v[0], len(v)}
	if b, ok := c[k]; ok {
		return b, nil
	}
	b, err := decision.Canonicalize(v)
	if err != nil {
		return nil, err
	}
	c[k] = b
	return b, nil
}

// boundRequest is the evaluation request an answer's leaf binds, in RFC
// 8785 canonical JSON: subject, action, resource and, when present,
// context — the item's own members where it has them, the batch's
// defaults where it does not. A canonical object is its members, sorted,
// with canonical values: action, context, resource, subject.
func (it evaluationItem) boundRequest(c canonicalMembers) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, k := range []string{"action", "context", "resource", "subject"} {
		v, ok := it.raw[k]
		if !ok {
			continue
		}
		cv, err := c.of(v)
		if err != nil {
			return nil, err
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(`"` + k + `":`)
		b.Write(cv)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeEvaluations reads an AuthZEN request strictly, as /v1/check's:
// I-JSON, no unknown member at any level the PDP interprets, every
// required member present with its type. The error names the member by
// its path (evaluations[2].subject.id).
func decodeEvaluations(body []byte, batch bool) (*evaluationsRequest, error) {
	if err := ijson.Check(body); err != nil {
		var e *ijson.Error
		if errors.As(err, &e) && e.Member() != "" {
			return nil, badField(e.Member(), "member %q: %s", e.Member(), e.Problem)
		}
		return nil, badField("body", "body is not a JSON object: %v", err)
	}
	allowed := []string{"subject", "action", "resource", "context"}
	if batch {
		allowed = append(allowed, "evaluations", "options")
	}
	top, err := object(body, "", allowed...)
	if err != nil {
		return nil, err
	}
	req := &evaluationsRequest{batch: batch, semantic: ExecuteAll}
	if !batch {
		it, err := decodeItem(top, nil, "")
		if err != nil {
			return nil, err
		}
		req.items = []evaluationItem{it}
		return req, nil
	}
	if v, ok := top["options"]; ok {
		opts, err := object(v, "options", "evaluations_semantic")
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
	if len(list) == 0 {
		// No evaluations, or none in the array: the request is a single
		// evaluation (§7.1), answered as one (§6).
		it, err := decodeItem(top, nil, "")
		if err != nil {
			return nil, err
		}
		req.batch, req.items = false, []evaluationItem{it}
		return req, nil
	}
	defaults := map[string]json.RawMessage{}
	for _, k := range []string{"subject", "action", "resource", "context"} {
		if v, ok := top[k]; ok {
			defaults[k] = v
		}
	}
	for i, v := range list {
		path := fmt.Sprintf("evaluations[%d]", i)
		m, err := object(v, path, "subject", "action", "resource", "context")
		if err != nil {
			return nil, err
		}
		it, err := decodeItem(m, defaults, path+".")
		if err != nil {
			return nil, err
		}
		req.items = append(req.items, it)
	}
	return req, nil
}

// decodeItem reads one evaluation: its own members, each replacing the
// default whole (AuthZEN §7.1.1).
func decodeItem(own, defaults map[string]json.RawMessage, prefix string) (evaluationItem, error) {
	it := evaluationItem{raw: map[string]json.RawMessage{}}
	for _, k := range []string{"subject", "action", "resource", "context"} {
		v, ok := own[k]
		path := prefix + k
		if !ok {
			if v, ok = defaults[k]; ok {
				path = k
			}
		}
		if !ok {
			if k == "context" {
				continue
			}
			return it, badField(prefix+k, "%s is required", prefix+k)
		}
		it.raw[k] = v
		var err error
		switch k {
		case "subject":
			it.eval.Subject, err = decodeEntity(v, path)
		case "resource":
			it.eval.Resource, err = decodeEntity(v, path)
		case "action":
			var m map[string]json.RawMessage
			if m, err = object(v, path, "name", "properties"); err == nil {
				if it.eval.Action, err = required(m, path, "name"); err == nil {
					it.eval.ActionProperties, err = props(m, path)
				}
			}
		case "context":
			if _, err = object(v, path); err == nil {
				it.eval.Context = v
			}
		}
		if err != nil {
			return it, err
		}
	}
	return it, nil
}

func decodeEntity(v json.RawMessage, path string) (policy.Entity, error) {
	var e policy.Entity
	m, err := object(v, path, "type", "id", "properties")
	if err != nil {
		return e, err
	}
	if e.Type, err = required(m, path, "type"); err != nil {
		return e, err
	}
	if e.ID, err = required(m, path, "id"); err != nil {
		return e, err
	}
	e.Properties, err = props(m, path)
	return e, err
}

// object reads a JSON object whose members are among allowed (none given:
// any member).
func object(v json.RawMessage, path string, allowed ...string) (map[string]json.RawMessage, error) {
	name := path
	if name == "" {
		name = "body"
	}
	if len(v) == 0 || v[0] != '{' {
		return nil, badField(name, "%s must be a JSON object", name)
	}
	m, err := members(v)
	if err != nil {
		return nil, badField(name, "%s must be a JSON object", name)
	}
	if len(allowed) > 0 {
		var unknown []string
		for k := range m {
			if !slices.Contains(allowed, k) {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown) // the same member named whatever the map's order
			member := unknown[0]
			if path != "" {
				member = path + "." + member
			}
			return nil, badField(member, "unknown member %q", guard.LogValue(member))
		}
	}
	return m, nil
}

// members splits a JSON object into its members, the values left as
// slices of v, through the one I-JSON reader.
func members(v []byte) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	err := ijson.Members(v, func(name, value []byte) error {
		m[string(name)] = value
		return nil
	})
	return m, err
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

func props(m map[string]json.RawMessage, path string) (json.RawMessage, error) {
	v, ok := m["properties"]
	if !ok {
		return nil, nil
	}
	if _, err := object(v, path+".properties"); err != nil {
		return nil, err
	}
	return v, nil
}

// authzenSystem is the system an AuthZEN caller speaks for: the policy
// package's id, bound to its principal by --caller-binding.
func (s *Server) authzenExtract(method string) func(r *http.Request) (binding.Request, error) {
	return func(r *http.Request) (binding.Request, error) {
		body, err := readBody(r)
		if err != nil {
			return binding.Request{}, err
		}
		req, err := decodeEvaluations(body, method == PathEvaluations)
		if err != nil {
			return binding.Request{}, err
		}
		r.Body = &decodedBody{ReadCloser: readCloser(body), req: req}
		return binding.Request{System: s.state.Load().pkg.ID, Method: "POST " + method}, nil
	}
}

// HeaderRequestID is the AuthZEN request identifier (§10.1.3).
const HeaderRequestID = "X-Request-ID"

// echoRequestID answers every response of an AuthZEN endpoint — a
// decision, a refusal, a bad request — with the X-Request-ID the request
// carried, as the text requires of a PDP (§10.1.3: "MUST include the same
// identifier"). The header is bounded by the server's header limit.
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
	return s.guarded(s.authzenExtract(path), h, s.azLatency.WithLabelValues(path))
}

// evaluationAnswer is one AuthZEN answer.
type evaluationAnswer struct {
	Decision bool           `json:"decision"`
	Context  map[string]any `json:"context"`
}

// evaluate decides every evaluation of a request (as its semantic says),
// signs them once and answers.
func (s *Server) evaluate(w http.ResponseWriter, r *http.Request, path string) {
	var req *evaluationsRequest
	var err error
	if d, ok := r.Body.(*decodedBody); ok {
		req, _ = d.req.(*evaluationsRequest)
	}
	if req == nil {
		var body []byte
		if body, err = readBody(r); err == nil {
			req, err = decodeEvaluations(body, path == PathEvaluations)
		}
	}
	if err != nil {
		badRequest(w, r, err)
		return
	}
	st := s.state.Load() // one snapshot: policy, registry and signers
	if st.pkg.API != policy.APIAuthZEN {
		guard.WriteHTTPError(w, http.StatusNotFound, "api_not_served", fmt.Sprintf("policy package %s serves POST /v1/check, not AuthZEN", st.pkg.ID))
		return
	}
	caller, mode := s.caller(r)
	var leaves []decision.EvaluationLeaf
	var answers []evaluationAnswer
	canon := canonicalMembers{}
	for i, it := range req.items {
		d := st.pkg.EvaluateAuthZEN(st.reg, it.eval)
		bound, err := it.boundRequest(canon) // canonical already: its SHA-256 is the digest
		sum := sha256.Sum256(bound)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		if err != nil {
			s.log.Error("pdp: binding an evaluation failed", "err", err, "index", i)
			guard.WriteHTTPError(w, http.StatusInternalServerError, "record_failed", "the decision record could not be built")
			return
		}
		a := evaluationAnswer{Decision: d.Allow, Context: map[string]any{}}
		if d.Invalid {
			a.Context["error"] = map[string]any{"status": http.StatusBadRequest, "message": d.Detail}
		}
		if d.Detail != "" {
			s.log.Info("pdp: evaluation denied before policy", "reason", d.Reason, "index", i, "detail", guard.LogValue(d.Detail))
		}
		leaves = append(leaves, decision.EvaluationLeaf{Index: i, RequestDigest: digest, Decision: d.Allow, Reason: d.Reason})
		answers = append(answers, a)
		s.evaluations.WithLabelValues(strconvBool(d.Allow), d.Reason).Inc()
		if (req.semantic == DenyOnFirstDeny && !d.Allow) || (req.semantic == PermitOnFirstPermit && d.Allow) {
			break
		}
	}
	rec := &decision.EvaluationRecord{DecisionID: uuid.NewString(), PolicyVersion: st.pkg.Version, Caller: caller,
		Provenance: decision.Provenance{Evaluator: policy.Evaluator, Mode: mode, PolicyPackageID: st.pkg.ID,
			PolicyPackageDigest: st.pkg.Digest, RegistrySnapshotDigest: st.reg.Digest, DecidedAt: s.now().UTC()}}
	_, proofs, err := st.evalSigner.SignEvaluations(rec, leaves)
	if err != nil {
		s.signingFailed(w, err)
		return
	}
	for i := range answers {
		answers[i].Context[decision.ContextKey] = proofs[i]
	}
	w.Header().Set("Content-Type", "application/json")
	if !req.batch {
		_ = json.NewEncoder(w).Encode(answers[0])
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"evaluations": answers})
}

func strconvBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// authzenConfig serves the PDP metadata (AuthZEN §9): the identifier, the
// two endpoints, and where the keys that sign answers are published. The
// identifier is never taken from the request (a Host header would make it
// whatever the caller says, defeating the check it exists for):
// --authzen-base-url, or the serving certificate's first name and the
// port served on; over plain HTTP there is none, and no metadata.
func (s *Server) authzenConfig(w http.ResponseWriter, _ *http.Request) {
	if s.state.Load().pkg.API != policy.APIAuthZEN {
		guard.WriteHTTPError(w, http.StatusNotFound, "api_not_served", "this PDP's policy package does not serve AuthZEN")
		return
	}
	base, err := s.pdpIdentifier()
	if err != nil {
		guard.WriteHTTPError(w, http.StatusNotFound, "no_pdp_identifier", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"policy_decision_point":       base,
		"access_evaluation_endpoint":  base + PathEvaluation,
		"access_evaluations_endpoint": base + PathEvaluations,
		"decision_signing_jwks_uri":   base + "/.well-known/jwks.json",
	})
}

// pdpIdentifier is the https URL the metadata names as this PDP.
func (s *Server) pdpIdentifier() (string, error) {
	if s.o.AuthZENBaseURL != "" {
		return strings.TrimSuffix(s.o.AuthZENBaseURL, "/"), nil
	}
	cfg := s.m.TLSConfig()
	if s.o.InsecureHTTP || cfg == nil {
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
