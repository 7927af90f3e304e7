package pdp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/spans"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

// The AuthZEN Search API endpoints (Authorization API 1.0 §8).
const (
	PathSearchSubject  = "/access/v1/search/subject"
	PathSearchResource = "/access/v1/search/resource"
	PathSearchAction   = "/access/v1/search/action"
)

// SearchProfile is the format of the records that sign AuthZEN search
// pages: one record per page (decision.SearchRecord).
var SearchProfile = decision.Profile{Schema: "callerauth.authzen-search.v1", Type: "callerauth-authzen-search+jwt"}

// searchKinds maps a search endpoint onto the member it searches for.
var searchKinds = map[string]string{PathSearchSubject: "subject", PathSearchResource: "resource", PathSearchAction: "action"}

// searchRequest is a decoded AuthZEN search: the evaluation every
// candidate completes, the member searched for and its type, and the page
// asked.
type searchRequest struct {
	kind     string // subject, resource or action
	typ      string // the type searched for (subject and resource searches)
	template policy.Evaluation
	limit    int    // page.limit; 0: the default
	token    string // page.token; "": the first page
	binding  string // the digest every page of this search shares: the request without page.token
	digest   string // the request's own digest, page.token included: what its page's record binds
	ignored  []string
	size     int // the request's bytes: what each evaluation of a candidate reads at most
}

// SearchWorkUnit is the template size up to which a search page may
// evaluate --authzen-search-max-candidates candidates; a larger template
// gets proportionally fewer per page.
const SearchWorkUnit = 1 << 10

// decodeSearch reads a search request to the endpoint of kind: the
// members the text defines with their types, the searched-for member's
// type (its id, if sent, ignored as the text requires), every other member
// ignored and listed.
func decodeSearch(body []byte, kind string) (*searchRequest, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	req := &searchRequest{kind: kind, size: len(body)}
	known := []string{"subject", "resource", "context", "page"}
	if kind != "action" {
		known = append(known, "action") // an action search has none (§8.5)
	}
	top, err := object(body, "", known, &req.ignored)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"subject", "action", "resource", "context"} {
		v, ok := top[k]
		if !ok {
			if k == "context" || (k == "action" && kind == "action") {
				continue
			}
			return nil, badField(k, "%s is required", k)
		}
		if k == kind {
			// The searched-for member: its type. An id is ignored (§8.3,
			// §8.4), and so are properties: the candidates are the
			// registry's.
			m, err := object(v, k, []string{"type", "id", "properties"}, &req.ignored)
			if err != nil {
				return nil, err
			}
			if req.typ, err = required(m, k, "type"); err != nil {
				return nil, err
			}
			for _, name := range []string{"id", "properties"} {
				if _, ok := m[name]; ok {
					req.ignored = append(req.ignored, k+"."+name)
				}
			}
			continue
		}
		if err := decodeMember(&req.template, k, v, k, true, &req.ignored); err != nil {
			return nil, err
		}
	}
	if v, ok := top["page"]; ok {
		page, err := object(v, "page", []string{"token", "limit"}, &req.ignored)
		if err != nil {
			return nil, err
		}
		if v, ok := page["token"]; ok {
			if req.token, err = str(v, "page.token"); err != nil {
				return nil, err
			}
		}
		if v, ok := page["limit"]; ok {
			n, err := strconv.ParseUint(string(v), 10, 31)
			if err != nil {
				return nil, badField("page.limit", "page.limit must be a non-negative integer")
			}
			req.limit = int(n)
		}
	}
	if req.digest, err = decision.Digest(body); err != nil {
		return nil, badField("body", "the request cannot be canonicalized: %v", err)
	}
	// Every page of one search shares every member but page (§8.2): the
	// token moves, and a PEP may ask another page size on the way.
	req.binding = req.digest
	if _, hasPage := top["page"]; hasPage {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(body, &m)
		delete(m, "page")
		b, _ := json.Marshal(m)
		if req.binding, err = decision.Digest(b); err != nil {
			return nil, badField("body", "the request cannot be canonicalized: %v", err)
		}
	}
	return req, nil
}

// pageToken is where a page ended, and the search it belongs to, with a
// MAC under the pdp's page-token key (derived from its signing keys, so
// every replica that signs with them accepts it, and a key rotation ends
// the searches in progress). It is opaque to the PEP but no secret: a
// token edited, or made by anyone but the pdp, is refused (400).
type pageToken struct {
	V     int    `json:"v"`
	After string `json:"after"` // the last candidate the previous page evaluated
	Of    string `json:"of"`    // the search's binding digest
}

// pageTokenVersion is the token's format: 2, MAC'd.
const pageTokenVersion = 2

func (t pageToken) encode(key []byte) string {
	b, _ := json.Marshal(t)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(pageMAC(key, payload))
}

func pageMAC(key []byte, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func decodeToken(s, binding string, key []byte) (pageToken, error) {
	var t pageToken
	notOurs := badField("page.token", "page.token is not a token this PDP issued (or it was issued under signing keys since rotated: start the search again)")
	payload, mac, ok := strings.Cut(s, ".")
	if !ok {
		return t, notOurs
	}
	sum, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil || !hmac.Equal(sum, pageMAC(key, payload)) {
		return t, notOurs
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || ijson.Decode(b, &t) != nil || t.V != pageTokenVersion {
		return t, notOurs
	}
	if t.Of != binding {
		return t, badField("page.token", "page.token belongs to another search: subject, action, resource and context must be what the first page's request sent (AuthZEN 1.0 §8.2)")
	}
	return t, nil
}

// searchHandler serves one of the three search endpoints through the same
// caller authentication as the evaluations.
func (s *Server) searchHandler(path string) http.Handler {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.searchPage(w, r, path) })
	return s.guarded(s.authzenExtract(path), s.withinShare(h), s.azLatency.WithLabelValues(path))
}

// searchAnswer is one page, page first (§8.3 recommends it).
type searchAnswer struct {
	Page    searchPage        `json:"page"`
	Context map[string]any    `json:"context,omitempty"`
	Results []json.RawMessage `json:"results"`
}

// entityRef and actionRef are search results (§8.3: entities of the
// type searched for).
type entityRef struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

type actionRef struct {
	Name string `json:"name"`
}

type searchPage struct {
	NextToken string `json:"next_token"`
	Count     int    `json:"count"`
}

// searchPage answers one page of a search: the candidates (the registry's
// entities of the type searched for, or the actions the schema applies to
// the subject's and resource's types), in order, from where the token
// says, each evaluated as the evaluation endpoint would; those it decides
// true are the results. A page ends with page.limit results, or after
// --authzen-search-max-candidates evaluations, or with the candidates.
func (s *Server) searchPage(w http.ResponseWriter, r *http.Request, path string) {
	req, err := readDecoded(r, s, func(body []byte) (*searchRequest, error) { return decodeSearch(body, searchKinds[path]) })
	if err != nil {
		badRequest(w, r, err)
		return
	}
	st := s.state.Get()
	if st.pkg.API != policy.APIAuthZEN {
		guard.WriteHTTPError(w, ReasonAPINotServed, fmt.Sprintf("policy package %s serves POST /v1/check, not AuthZEN", st.pkg.ID))
		return
	}
	var after string
	if req.token != "" {
		t, err := decodeToken(req.token, req.binding, st.pageKey)
		if err != nil {
			badRequest(w, r, err)
			return
		}
		after = t.After
	}
	var candidates []string
	switch req.kind {
	case "action":
		candidates = st.pkg.SearchActions(req.template.Subject.Type, req.template.Resource.Type)
	default:
		candidates = st.pkg.SearchCandidates(st.reg, req.kind, req.typ)
	}
	limit := req.limit
	if limit == 0 || limit > s.c.SearchPageSize {
		limit = s.c.SearchPageSize
	}
	start := 0
	if after != "" {
		start = sort.SearchStrings(candidates, after)
		if start < len(candidates) && candidates[start] == after {
			start++
		}
	}
	ans := searchAnswer{Results: []json.RawMessage{}}
	ignored := slices.Clone(req.ignored)
	seen := make(map[string]struct{}, len(ignored))
	for _, p := range ignored {
		seen[p] = struct{}{}
	}
	// Each evaluation reads the whole template: a page evaluates at most
	// --authzen-search-max-candidates candidates of a template up to
	// SearchWorkUnit bytes, proportionally fewer of a larger one (at least
	// one), so that a page's work is bounded whatever the request's shape.
	most := max(1, s.c.MaxCandidates*SearchWorkUnit/max(req.size, SearchWorkUnit))
	evaluated, i := 0, start
	// The template's members, all but the one searched, are the same for
	// every candidate: converted once.
	batch := st.pkg.NewBatch(st.reg)
	shared := policy.MemberSubject | policy.MemberAction | policy.MemberResource | policy.MemberContext
	shared &^= map[string]policy.Members{"subject": policy.MemberSubject, "resource": policy.MemberResource, "action": policy.MemberAction}[req.kind]
	_, espan := spans.Start(r.Context(), tracerName, "pdp.evaluate")
	for ; i < len(candidates) && len(ans.Results) < limit && evaluated < most && r.Context().Err() == nil; i++ {
		c := candidates[i]
		e := req.template
		var result []byte
		switch req.kind {
		case "subject":
			e.Subject = policy.Entity{Type: req.typ, ID: c}
			result, _ = json.Marshal(entityRef{Type: req.typ, ID: c})
		case "resource":
			e.Resource = policy.Entity{Type: req.typ, ID: c}
			result, _ = json.Marshal(entityRef{Type: req.typ, ID: c})
		case "action":
			e.Action = c
			result, _ = json.Marshal(actionRef{Name: c})
		}
		e.Shared = shared
		d := batch.EvaluateAuthZEN(e)
		evaluated++
		for _, p := range d.Ignored {
			if _, ok := seen[p]; !ok {
				seen[p] = struct{}{}
				ignored = append(ignored, p)
			}
		}
		if d.Allow {
			ans.Results = append(ans.Results, result)
		}
	}
	s.searchEvaluated.WithLabelValues(path).Add(float64(evaluated))
	if espan.IsRecording() {
		espan.SetAttributes(attribute.Int("pdp.evaluations", evaluated), attribute.Int("pdp.results", len(ans.Results)))
	}
	espan.End()
	if err := r.Context().Err(); err != nil {
		return // the client has gone: no page to sign
	}
	if i < len(candidates) {
		// i > start: limits of at least 1 evaluate at least one candidate.
		ans.Page.NextToken = pageToken{V: pageTokenVersion, After: candidates[i-1], Of: req.binding}.encode(st.pageKey)
	}
	ans.Page.Count = len(ans.Results)
	unsigned, err := json.Marshal(ans)
	if err != nil {
		s.signingFailed(w, err)
		return
	}
	caller, mode := s.caller(r)
	rec := &decision.SearchRecord{DecisionID: uuid.NewString(), PolicyVersion: st.pkg.Version, Caller: caller,
		Endpoint: strings.TrimPrefix(path, "/access/v1/"), RequestDigest: req.digest, RequestID: requestID(r), Ignored: ignored,
		Provenance: decision.Provenance{Evaluator: policy.Evaluator, Mode: mode, PolicyPackageID: st.pkg.ID,
			PolicyPackageDigest: st.pkg.Digest, RegistrySnapshotDigest: st.reg.Digest, DecidedAt: s.now().UTC()}}
	_, sspan := spans.Start(r.Context(), tracerName, "pdp.sign")
	proof, err := st.searchSigner.SignSearch(rec, unsigned)
	sspan.End()
	if err != nil {
		s.signingFailed(w, err)
		return
	}
	ans.Context = map[string]any{decision.ContextKey: proof}
	b, err := json.Marshal(ans)
	if err != nil {
		guard.WriteHTTPError(w, ReasonEncodingFailed, "")
		return
	}
	if !s.keep(w, r, true, "", b) {
		return
	}
	writeBody(w, r, append(b, '\n'))
}
