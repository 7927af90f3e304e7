package decisionlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/reason"
)

// Paths of the read API, under a service's listener (docs/decision-log.md).
const (
	// PathSearch: GET, the decisions a query selects, a page at a time.
	PathSearch = "/v1/decisions"
	// PathEntry: GET PathEntry+"{index}", one decision with its inclusion
	// proof in the latest checkpoint (or ?size=).
	PathEntry = "/v1/decisions/"
	// PathConsistency: GET, the proof that the tree of ?old= is a prefix
	// of the latest checkpoint's (or ?size=).
	PathConsistency = "/v1/decisions/consistency"
	// PathTiles: the log as C2SP tlog-tiles (checkpoint, tile/…).
	PathTiles = "/v1/decisions/log/"
)

// ReaderSystem is the system a reader of the log represents: the
// service's caller binding names who may read it (the pdp's
// --caller-binding callerauth/decision-log=PRINCIPAL).
const ReaderSystem = "callerauth/decision-log"

// ReasonBadQuery refuses a read the API cannot answer as asked.
var ReasonBadQuery = reason.New("bad_decision_query", reason.InvalidArgument, "the decision log cannot read that query")

// ReasonLogUnreadable refuses a read the log could not answer from what
// it holds (a damaged file).
var ReasonLogUnreadable = reason.New("decision_log_unreadable", reason.Internal, "the decision log could not read what it holds; its operator is told")

// ReasonNotHeld refuses a read of what the log does not hold.
var ReasonNotHeld = reason.New("decision_not_held", reason.NotFound, "the decision log does not hold that: beyond its latest checkpoint, or pruned")

// Routes adds the read API to mux, each handler wrapped by guard (the
// service's caller authentication, asking for ReaderSystem); fail
// answers a refusal as the service does (guard.WriteHTTPError).
func (l *Log) Routes(mux *http.ServeMux, guard func(http.Handler) http.Handler, fail func(http.ResponseWriter, reason.Reason, string)) {
	a := api{l, fail}
	mux.Handle("GET "+PathSearch, guard(http.HandlerFunc(a.search)))
	mux.Handle("GET "+PathConsistency, guard(http.HandlerFunc(a.consistency)))
	mux.Handle("GET "+PathEntry+"{index}", guard(http.HandlerFunc(a.show)))
	mux.Handle("GET "+PathTiles, guard(http.StripPrefix(PathTiles[:len(PathTiles)-1], l.log.Handler())))
}

// api is the read API's handlers.
type api struct {
	l    *Log
	fail func(http.ResponseWriter, reason.Reason, string)
}

// Stored is a decision as the read API returns it: the log it is in
// (its origin; replicas keep one each) and its index there.
type Stored struct {
	Origin string          `json:"origin,omitempty"`
	Index  int64           `json:"index"`
	Entry  json.RawMessage `json:"entry"`
	// Cursor is its place in the search's order (after= reads on from
	// it); absent outside a search.
	Cursor int64 `json:"cursor,omitempty"`
}

// Page is a search's answer; Next is the cursor of the next page (the
// after= to ask with), absent on the last. Indexed is how far the search
// index holds this replica's log: the decisions below it, of the
// Origin's log.
type Page struct {
	Decisions []Stored `json:"decisions"`
	Next      *int64   `json:"next,omitempty"`
	Origin    string   `json:"origin"`
	Indexed   int64    `json:"indexed"`
}

// Proved is one decision with its inclusion proof: Proof (base64
// hashes, tlog.RecordProof) proves Entry at Index in the tree of the
// checkpoint's size.
type Proved struct {
	Stored
	Checkpoint string   `json:"checkpoint"`
	Proof      []string `json:"proof"`
}

// Consistency proves the tree of Old a prefix of the checkpoint's.
type Consistency struct {
	Old        int64    `json:"old"`
	Checkpoint string   `json:"checkpoint"`
	Proof      []string `json:"proof"`
}

func (a api) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	query := Query{Origin: q.Get("origin"), Caller: q.Get("caller"), System: q.Get("system"), Tenant: q.Get("tenant"), Reason: q.Get("reason"), Limit: 100}
	var errs []error
	num := func(name string, dst *int64, lo int64) {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < lo {
				errs = append(errs, fmt.Errorf("%s=%q: want an integer of at least %d", name, v, lo))
				return
			}
			*dst = n
		}
	}
	num("after", &query.After, 0)
	limit := int64(query.Limit)
	num("limit", &limit, 1)
	query.Limit = int(min(limit, MaxSearch))
	when := func(name string, dst *time.Time) {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want an RFC 3339 time", name, v))
				return
			}
			*dst = t
		}
	}
	when("since", &query.Since)
	when("until", &query.Until)
	switch v := q.Get("decision"); v {
	case "":
	case "allowed", "refused":
		allowed := v == "allowed"
		query.Allowed = &allowed
	default:
		errs = append(errs, fmt.Errorf("decision=%q: want allowed or refused", v))
	}
	if err := errors.Join(errs...); err != nil {
		a.fail(w, ReasonBadQuery, err.Error())
		return
	}
	indexed := a.l.search.position()
	found, err := a.l.search.find(r.Context(), query)
	if err != nil {
		a.fail(w, datastore.ReasonUnavailable, "")
		return
	}
	page := Page{Decisions: make([]Stored, len(found)), Origin: a.l.log.Origin(), Indexed: indexed}
	for i, f := range found {
		page.Decisions[i] = Stored{Origin: f.Origin, Index: f.Index, Entry: f.Data, Cursor: f.Seq}
	}
	if len(found) == query.Limit {
		next := found[len(found)-1].Seq
		page.Next = &next
	}
	writeJSON(w, page)
}

// size is the tree an answer proves against: ?size= (at most the latest
// checkpoint's, whose note the answer carries), or the latest.
func (a api) size(w http.ResponseWriter, r *http.Request) (translog.Checkpoint, int64, bool) {
	c, ok := a.l.log.Latest()
	if !ok {
		a.fail(w, ReasonNotHeld, "no checkpoint is signed yet")
		return c, 0, false
	}
	size := c.Size
	if v := r.URL.Query().Get("size"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > c.Size {
			a.fail(w, ReasonBadQuery, fmt.Sprintf("size=%q: want a tree size from 1 to the latest checkpoint's %d", v, c.Size))
			return c, 0, false
		}
		size = n
	}
	return c, size, true
}

func (a api) show(w http.ResponseWriter, r *http.Request) {
	index, err := strconv.ParseInt(r.PathValue("index"), 10, 64)
	if err != nil || index < 0 {
		a.fail(w, ReasonBadQuery, fmt.Sprintf("%q: want a decision's index", r.PathValue("index")))
		return
	}
	c, size, ok := a.size(w, r)
	if !ok {
		return
	}
	if index >= size {
		a.fail(w, ReasonNotHeld, fmt.Sprintf("decision %d is not in the tree of %d", index, size))
		return
	}
	data, err := a.l.log.VerifiedEntry(index)
	if errors.Is(err, translog.ErrNotHeld) {
		a.fail(w, ReasonNotHeld, fmt.Sprintf("decision %d is pruned", index))
		return
	}
	if err == nil {
		var p tlog.RecordProof
		if p, err = a.l.log.ProveEntry(index, size); err == nil {
			writeJSON(w, Proved{Stored: Stored{Origin: a.l.log.Origin(), Index: index, Entry: data}, Checkpoint: checkpointAt(c, size), Proof: hashes(p)})
			return
		}
	}
	if a.l.logger != nil {
		a.l.logger.Error("decision log: a decision could not be read from the log", "index", index, "err", err)
	}
	a.fail(w, ReasonLogUnreadable, "")
}

func (a api) consistency(w http.ResponseWriter, r *http.Request) {
	c, size, ok := a.size(w, r)
	if !ok {
		return
	}
	old, err := strconv.ParseInt(r.URL.Query().Get("old"), 10, 64)
	if err != nil || old < 1 || old > size {
		a.fail(w, ReasonBadQuery, fmt.Sprintf("old=%q: want a tree size from 1 to %d", r.URL.Query().Get("old"), size))
		return
	}
	p, err := a.l.log.ProveTree(size, old)
	if err != nil {
		a.fail(w, ReasonNotHeld, fmt.Sprintf("the tree of %d is below the log's minimum index (pruned)", old))
		return
	}
	writeJSON(w, Consistency{Old: old, Checkpoint: checkpointAt(c, size), Proof: hashes(p)})
}

// checkpointAt is the latest checkpoint's note when it is of size;
// otherwise "" (the proof is against a size the caller named, whose root
// it holds from an earlier checkpoint).
func checkpointAt(c translog.Checkpoint, size int64) string {
	if c.Size != size {
		return ""
	}
	return string(c.Note)
}

func hashes[T ~[]tlog.Hash](p T) []string {
	out := make([]string, len(p))
	for i, h := range p {
		out[i] = h.String()
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
