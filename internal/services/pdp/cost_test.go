package pdp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
	costOf "github.com/callerauth/callerauth/internal/kit/cost"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// allocated is the bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	n, _ := costOf.Of(f)
	return n
}

// unknown is n members no AuthZEN object defines: "u0":0,"u1":0,…
func unknown(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"u%d":0`, i)
	}
	return b.String()
}

// items is n minimal batch items that take every other member from the
// defaults.
func items(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"resource":{"type":"todo","id":"t%d"}}`, i)
	}
	return b.String()
}

// TestAuthZENCallerRefusedBeforeItsBodyIsRead: a valid token of a service
// account not bound to the package is refused (403) before a byte of what
// it asks is decoded — the outside probe's batch of 10,000 unknown members
// in a default, which cost 161 MB and 6 s of CPU before its 403, costs the
// pdp next to nothing once the caller's verdict is cached.
func TestAuthZENCallerRefusedBeforeItsBodyIsRead(t *testing.T) {
	e, _ := startTodo(t)
	unbound := e.token(t, "not-bound", "flex-auth", time.Time{})
	if code, _ := e.authzen(t, unbound, pdp.PathEvaluation, `{}`); code != 403 { // its verdict cached
		t.Fatalf("an unbound caller: %d; want 403", code)
	}
	body := `{"subject":{"type":"user","id":"u",` + unknown(10000) + `},"action":{"name":"can_read_todos"},"evaluations":[` + items(pdp.MaxEvaluations) + `]}`
	var code int
	n := allocated(func() { code, _ = e.authzen(t, unbound, pdp.PathEvaluations, body) })
	t.Logf("an unbound caller's %d-byte batch: %d, %d bytes allocated (%.2f a request byte)", len(body), code, n, float64(n)/float64(len(body)))
	if code != 403 {
		t.Fatalf("an unbound caller: %d; want 403", code)
	}
	// The client's own copy of the body and the drain of what was not
	// read are all that is left; how much the drain reads depends on how
	// much of the body had arrived when the refusal was sent (measured
	// 1.3–2.05 bytes a request byte, in-process, client included).
	// Decoding it would cost hundreds (TestAuthZENCostIsLinearInItsBytes:
	// ~23 KB for a ~40-byte item).
	if n > uint64(len(body))*3 {
		t.Fatalf("refusing an unbound caller allocated %d bytes for a %d-byte body: its body was decoded", n, len(body))
	}
}

// TestAuthZENCostIsLinearInItsBytes: the worst request shapes found — N
// unknown members in a default that every item inherits, in every item,
// nested deep, a default context the policy does not read (so each item
// ignores its members), one large default hashed into every item — each
// at two sizes, the second twice the first in members and items alike.
// Each costs at most maxAllocPerByte bytes allocated per request byte,
// answered or refused, and doubling the request at most
// maxGrowthOnDoubling times the bytes allocated: linear, where before the
// first shape grew with members × items (146 KB allocated hundreds of MB
// for an answer listing every ignored path in every item) and the last
// hashed the default once per item.
func TestAuthZENCostIsLinearInItsBytes(t *testing.T) {
	// docs/reliability.md: a minimal item (~40 bytes) is answered with the
	// record's JWS and its proof (~2.2 KB), ~23 KB allocated.
	const maxAllocPerByte, maxGrowthOnDoubling = 1024, 2.5
	e, tok := startTodo(t)
	shapes := []costShape{
		{"unknown members in a default", func(k int) string {
			return `{"subject":{"type":"user","id":"u",` + unknown(4000*k) + `},"action":{"name":"can_read_todos"},"evaluations":[` + items(250*k) + `]}`
		}},
		{"unknown members in every item", func(k int) string {
			var its []string
			for i := range 250 * k {
				its = append(its, fmt.Sprintf(`{"resource":{"type":"todo","id":"t%d",%s}}`, i, unknown(6*k)))
			}
			return `{"subject":{"type":"user","id":"u"},"action":{"name":"can_read_todos"},"evaluations":[` + strings.Join(its, ",") + `]}`
		}},
		{"unknown members nested deep", func(k int) string {
			nested := strings.Repeat(`{"a":`, 1000*k) + "0" + strings.Repeat("}", 1000*k)
			return `{"subject":{"type":"user","id":"u","x":` + nested + `},"action":{"name":"can_read_todos"},"context":{"n":` + nested + `},"evaluations":[` + items(250*k) + `]}`
		}},
		{"a default context the policy does not read", func(k int) string {
			return `{"subject":{"type":"user","id":"u"},"action":{"name":"can_read_todos"},"context":{` + unknown(8*k) + `},"evaluations":[` + items(250*k) + `]}`
		}},
		{"one large default in every item", func(k int) string {
			return `{"subject":{"type":"user","id":"u","properties":{"note":"` + strings.Repeat("x", 150<<10*k) + `"}},"action":{"name":"can_read_todos"},"evaluations":[` + items(250*k) + `]}`
		}},
	}
	holdLinear(t, e, tok, shapes, maxAllocPerByte, maxGrowthOnDoubling, 200, 400)
}

// costShape is a request shape at size k (1, 2: twice the bytes).
type costShape struct {
	name string
	body func(k int) string // k = 1, 2
}

// holdLinear sends each shape at both sizes and holds what each costs
// to at most maxAllocPerByte bytes allocated a request byte and to at
// most maxGrowth times when the request doubles; each answer must have
// one of the codes.
func holdLinear(t *testing.T, e *env, tok string, shapes []costShape, maxAllocPerByte int, maxGrowth float64, codes ...int) {
	t.Helper()
	for _, c := range shapes {
		var cost [3]uint64
		for k := 1; k <= 2; k++ {
			body := c.body(k)
			var code int
			var resp []byte
			var cpu time.Duration
			cost[k], cpu = costOf.Of(func() { code, resp = e.authzen(t, tok, pdp.PathEvaluations, body) })
			per := float64(cost[k]) / float64(len(body))
			t.Logf("%s ×%d: %d bytes asked, %d answered (%d), %d allocated: %.1f a request byte; CPU %.1f µs a KiB", c.name, k, len(body), len(resp), code, cost[k], per, float64(cpu.Microseconds())/float64(len(body))*1024)
			if !slices.Contains(codes, code) {
				t.Errorf("%s: %d %.300s", c.name, code, resp)
			}
			if per > float64(maxAllocPerByte) {
				t.Errorf("%s ×%d: %.1f bytes allocated a request byte; the bound is %d", c.name, k, per, maxAllocPerByte)
			}
		}
		if g := float64(cost[2]) / float64(cost[1]); g > maxGrowth {
			t.Errorf("%s: twice the request allocated %.2f times as much; linear is 2 (at most %.1f)", c.name, g, maxGrowth)
		}
	}
}

// TestAuthZENRequestIDIsBounded: the record binds the X-Request-ID and
// every answer of a batch carries the record, so a header near the
// server's 32 KiB limit would be repeated a thousand times: past
// MaxRequestIDBytes it is refused, naming the header and the limit, and
// echoed nonetheless.
func TestAuthZENRequestIDIsBounded(t *testing.T) {
	e, tok := startTodo(t)
	body := `{"subject":{"type":"user","id":"u"},"action":{"name":"can_read_todos"},"evaluations":[` + items(10) + `]}`
	ok := strings.Repeat("r", pdp.MaxRequestIDBytes)
	if code, resp, h := e.postID(t, tok, pdp.PathEvaluations, body, ok); code != 200 || h.Get(pdp.HeaderRequestID) != ok {
		t.Fatalf("an X-Request-ID of %d bytes: %d %.200s", len(ok), code, resp)
	}
	long := ok + "r"
	code, resp, h := e.postID(t, tok, pdp.PathEvaluations, body, long)
	if code != 400 || !strings.Contains(string(resp), `"field":"X-Request-ID"`) || !strings.Contains(string(resp), fmt.Sprint(pdp.MaxRequestIDBytes)) || h.Get(pdp.HeaderRequestID) != long {
		t.Fatalf("an X-Request-ID of %d bytes: %d %.300s (echoed %t)", len(long), code, resp, h.Get(pdp.HeaderRequestID) == long)
	}
}

// TestAuthZENUnreadableItemsVerify: an item that cannot be read is answered
// false with its error, and its request_digest covers the whole item as
// docs/pdp.md defines it — every member it has, its own or a default's —
// so the batch verifies whole against the request that asked it. Before,
// the digest covered only the members read before the failure (a missing
// resource with a default context: {subject, action}), and such a batch
// never verified.
func TestAuthZENUnreadableItemsVerify(t *testing.T) {
	e, tok := startTodo(t)
	body := `{"subject":{"type":"user","id":"` + morty + `"},"action":{"name":"can_read_todos"},"context":{"time":"now"},"evaluations":[` +
		`{"resource":{"type":"todo","id":"t1"}},` +
		`{"action":{"name":"can_update_todo"}},` +
		`{"subject":{"type":"user"},"resource":{"type":"todo","id":"t2"}},` +
		`{"resource":{"type":"todo","id":"t3"},"context":{"deep":{"x":1}},"action":{"name":"can_read_todos","properties":7}}]}`
	code, resp := e.authzen(t, tok, pdp.PathEvaluations, body)
	if code != 200 {
		t.Fatalf("%d %s", code, resp)
	}
	_, leaves, err := decision.VerifyEvaluations("evaluations", []byte(body), resp, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: e.srv.EvaluationSigner().JWKS()})
	if err != nil {
		t.Fatalf("a batch with unreadable items does not verify: %v\n%s", err, resp)
	}
	invalid := 0
	for _, l := range leaves {
		if l.Reason == "invalid_evaluation" {
			invalid++
		}
	}
	if invalid != 3 || len(leaves) != 4 {
		t.Fatalf("%d answers, %d invalid; want 4 and 3: %+v", len(leaves), invalid, leaves)
	}
}

// TestAuthZENEchoesTheRequestIDEverywhere: the X-Request-ID comes back on
// every answer of the API — the mux's own 404 under /access/v1/ and 405,
// an unknown tenant, the metadata and the JWKS — not only on decisions.
func TestAuthZENEchoesTheRequestIDEverywhere(t *testing.T) {
	e, _ := startTodo(t)
	for _, c := range []struct{ method, path string }{
		{"POST", "/access/v1/nothing"}, {"GET", pdp.PathEvaluation}, {"POST", "/no-such-tenant" + pdp.PathEvaluation},
		{"GET", pdp.PathAuthZENConfig}, {"GET", pdp.PathJWKS}, {"DELETE", "/v1/check"},
	} {
		req, _ := http.NewRequest(c.method, e.url+c.path, strings.NewReader("{}"))
		req.Header.Set(pdp.HeaderRequestID, "id-"+c.path)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if got := resp.Header.Get(pdp.HeaderRequestID); got != "id-"+c.path {
			t.Errorf("%s %s: %d, X-Request-ID %q", c.method, c.path, resp.StatusCode, got)
		}
	}
}

// TestAuthZENSearchStopsWithItsClient: a search page whose client has gone
// evaluates no candidate and signs nothing (before, the handler went on
// for tens of seconds of CPU after the client hung up).
func TestAuthZENSearchStopsWithItsClient(t *testing.T) {
	e := start(t, "enforce", func(o *pdp.Options) {
		o.PolicyDir, o.Registry = filepath.Join(certification, "policy"), filepath.Join(certification, "registry.json")
		o.CallerBindings = []string{"authzen-certification=system:serviceaccount:secrets-engine:pep"}
	})
	tok := e.token(t, "pep", "flex-auth", time.Time{})
	body := `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record"}}`
	candidates := func() float64 {
		n, err := scrape.Values(e.srv.Registry())
		if err != nil {
			t.Fatal(err)
		}
		return n[`pdp_authzen_search_candidates_total{`+pdp.PathSearchResource+`}`]
	}
	serve := func(ctx context.Context) *httptest.ResponseRecorder {
		return e.serveIn(ctx, tok, pdp.PathSearchResource, body)
	}
	if rec := serve(context.Background()); rec.Code != 200 || candidates() == 0 {
		t.Fatalf("a search page: %d %s, %v candidates", rec.Code, rec.Body, candidates())
	}
	before := candidates()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	rec := serve(gone)
	if n := candidates() - before; n != 0 || strings.Contains(rec.Body.String(), "record_jws") {
		t.Fatalf("a page whose client had gone: %v candidates evaluated, answered %q; want none and nothing signed", n, rec.Body.String())
	}
}

// TestBuildInfoScraped: the pdp's registry carries pdp_build_info, 1,
// labelled with the build (every service registers its own).
func TestBuildInfoScraped(t *testing.T) {
	e, _ := startTodo(t)
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "pdp_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] == "" || !strings.HasPrefix(labels["goversion"], "go1.") {
			t.Fatalf("pdp_build_info: %v %v", m.GetGauge().GetValue(), labels)
		}
		return
	}
	t.Fatal("no pdp_build_info in the registry")
}

// costPolicy is an example AuthZEN policy and where its schema declares a
// string the request may carry (empty: none — its entities are the
// registry's alone).
type costPolicy struct {
	name, dir, binding string
	// subject, action and resource are the defaults' members with a
	// declared string member set to %s, or without one.
	subject, action, resource string
	// declared is the member ("subject" or "resource") whose properties
	// hold the declared string, and its JSON with %s for the string.
	declared, declaredJSON string
}

// start serves the policy in enforce, bound to the principal pep, and
// returns its environment and a token of pep.
func (p costPolicy) start(t *testing.T) (*env, string) {
	t.Helper()
	e := start(t, "enforce", func(o *pdp.Options) {
		o.PolicyDir, o.Registry = filepath.Join(p.dir, "policy"), filepath.Join(p.dir, "registry.json")
		o.CallerBindings = []string{p.binding + "=system:serviceaccount:secrets-engine:pep"}
	})
	return e, e.token(t, "pep", "flex-auth", time.Time{})
}

var costPolicies = []costPolicy{
	{"todo", todo, "todo", `{"type":"user","id":"CiRmZDA2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs"}`, `{"name":"can_update_todo"}`, `{"type":"todo","id":"t"}`,
		"resource", `{"type":"todo","id":"t","properties":{"ownerID":"%s"}}`},
	{"authzen-certification", certification, "authzen-certification", `{"type":"user","id":"alice"}`, `{"name":"delete","properties":{"soft":true}}`, `{"type":"record","id":"record-1"}`,
		"subject", `{"type":"user","id":"alice","properties":{"role":"%s"}}`},
	{"authzen-search", "../../../examples/authzen-search", "authzen-search", `{"type":"user","id":"alice"}`, `{"name":"view"}`, `{"type":"record","id":"r1"}`, "", ""},
}

// TestAuthZENCostOnEveryPolicy: on every example policy that serves
// AuthZEN, a batch costs what its bytes hold whatever carries them — a
// member the schema declares or one it does not, in a default every item
// inherits or in each item — at two sizes: at most maxAllocPerByte bytes
// allocated a request byte, and doubling the request at most
// maxGrowthOnDoubling times the bytes (a declared default was decoded
// once per item before: ×3.7 a doubling).
func TestAuthZENCostOnEveryPolicy(t *testing.T) {
	const maxAllocPerByte, maxGrowthOnDoubling = 1024, 2.5
	for _, p := range costPolicies {
		t.Run(p.name, func(t *testing.T) {
			e, tok := p.start(t)
			big := func(n int) string { return strings.Repeat("x", n) }
			withProps := func(entity, props string) string { // entity JSON with a properties member
				return strings.TrimSuffix(entity, "}") + `,"properties":{` + props + `}}`
			}
			batch := func(subject, resource string, item func(i int) string, n int) string {
				its := make([]string, n)
				for i := range its {
					its[i] = item(i)
				}
				return `{"subject":` + subject + `,"action":` + p.action + `,"resource":` + resource + `,"evaluations":[` + strings.Join(its, ",") + `]}`
			}
			empty := func(int) string { return `{}` }
			shapes := []costShape{
				{"an undeclared member in a default", func(k int) string {
					return batch(withProps(p.subject, `"zz_note":"`+big(100<<10*k)+`"`), p.resource, empty, 250*k)
				}},
				{"an undeclared member in every item", func(k int) string {
					return batch(p.subject, p.resource, func(int) string {
						return `{"subject":` + withProps(p.subject, `"zz_note":"`+big(400*k)+`"`) + `}`
					}, 250*k)
				}},
			}
			if p.declared != "" {
				declared := func(n int) string { return fmt.Sprintf(p.declaredJSON, big(n)) }
				shapes = append(shapes,
					costShape{"a declared member in a default", func(k int) string {
						if p.declared == "subject" {
							return batch(declared(100<<10*k), p.resource, empty, 250*k)
						}
						return batch(p.subject, declared(100<<10*k), empty, 250*k)
					}},
					costShape{"a declared member in every item", func(k int) string {
						return batch(p.subject, p.resource, func(int) string { return `{"` + p.declared + `":` + declared(400*k) + `}` }, 250*k)
					}})
			}
			holdLinear(t, e, tok, shapes, maxAllocPerByte, maxGrowthOnDoubling, 200)
		})
	}
}

// MaxAnswerFactor is how many times its request's bytes (body and
// X-Request-ID) an AuthZEN answer may be, at most: docs/pdp.md states it
// and how it holds by construction — each answer carries the record's
// JWS and its Merkle path (about 2.2 KB, whatever the item; the smallest
// item, {}, is 3 bytes of the request), what the record repeats of the
// request is at most RecordShareFactor times the request over all the
// answers (base64 in the JWS: 4/3 of that), and the ignored paths the
// leaves list at most twice the request plus MaxIgnoredSlack.
const MaxAnswerFactor = 1000

// TestAuthZENAnswerFactor searches the request shapes for the largest
// answer a request's bytes can buy, on every example policy that serves
// AuthZEN: members the pdp does not interpret at the top level, in a
// default, in a default's properties (which every item inherits), in
// each item and in each item's properties; names of 1 and 39 bytes; 1 to
// 1,000 items; no X-Request-ID, a UUID's and the longest. A shape whose
// answer passes MaxAnswerFactor fails it; a shape refused is a 400 that
// names the limit. Before the record's share was bounded, a batch of
// 1,000 {} under 100 top-level members of 39 bytes and a 1 KiB
// X-Request-ID was answered 1,074 times its bytes.
func TestAuthZENAnswerFactor(t *testing.T) {
	worst, worstShape := 0.0, ""
	for _, p := range costPolicies {
		t.Run(p.name, func(t *testing.T) {
			e, tok := p.start(t)
			members := func(n, size int) string {
				ms := make([]string, n)
				for i := range ms {
					ms[i] = fmt.Sprintf(`"%0*d":0`, size, i)
				}
				return strings.Join(ms, ",")
			}
			with := func(obj, ms string) string { return strings.TrimSuffix(obj, "}") + "," + ms + "}" }
			withProps := func(obj, ms string) string { return with(obj, `"properties":{`+ms+`}`) }
			placements := []struct {
				name string
				body func(n int, ms string) string
			}{
				{"top level", func(n int, ms string) string {
					return `{"subject":` + p.subject + `,"action":` + p.action + `,"resource":` + p.resource + `,` + ms + `,"evaluations":[` + repeatItem(`{}`, n) + `]}`
				}},
				{"a default", func(n int, ms string) string {
					return `{"subject":` + with(p.subject, ms) + `,"action":` + p.action + `,"resource":` + p.resource + `,"evaluations":[` + repeatItem(`{}`, n) + `]}`
				}},
				{"a default's properties", func(n int, ms string) string {
					return `{"subject":` + withProps(p.subject, ms) + `,"action":` + p.action + `,"resource":` + withProps(p.resource, ms) + `,"evaluations":[` + repeatItem(`{}`, n) + `]}`
				}},
				{"a default context", func(n int, ms string) string {
					return `{"subject":` + p.subject + `,"action":` + p.action + `,"resource":` + p.resource + `,"context":{` + ms + `},"evaluations":[` + repeatItem(`{}`, n) + `]}`
				}},
				{"each item", func(n int, ms string) string {
					return `{"subject":` + p.subject + `,"action":` + p.action + `,"resource":` + p.resource + `,"evaluations":[` + repeatItem(`{`+ms+`}`, n) + `]}`
				}},
				{"each item's properties", func(n int, ms string) string {
					return `{"action":` + p.action + `,"resource":` + p.resource + `,"evaluations":[` + repeatItem(`{"subject":`+withProps(p.subject, ms)+`}`, n) + `]}`
				}},
			}
			ids := []string{"", "0b7f3f4e-7f4c-4d89-9d3e-5d1f0b6b7a21", strings.Repeat("r", pdp.MaxRequestIDBytes)}
			for _, pl := range placements {
				for _, n := range []int{1, 2, 10, 100, pdp.MaxEvaluations} {
					for _, size := range []int{1, 39} {
						for _, m := range []int{1, 4, 16, 100} {
							body := pl.body(n, members(m, size))
							for _, id := range ids {
								code, resp, _ := e.postID(t, tok, pdp.PathEvaluations, body, id)
								shape := fmt.Sprintf("%s: %d members of %d bytes in %s, %d items, X-Request-ID of %d bytes", p.name, m, size, pl.name, n, len(id))
								switch code {
								case 200:
								case 400:
									if !strings.Contains(string(resp), "at most") && !strings.Contains(string(resp), "more than") && !strings.Contains(string(resp), "larger than") {
										t.Errorf("%s: refused without naming its limit: %.300s", shape, resp)
									}
									continue
								default:
									t.Errorf("%s: %d %.300s", shape, code, resp)
									continue
								}
								f := float64(len(resp)) / float64(len(body)+len(id))
								if f > worst {
									worst, worstShape = f, shape
								}
								if f > MaxAnswerFactor {
									t.Errorf("%s: %d bytes asked, %d answered: %.0f×; the stated bound is %d", shape, len(body)+len(id), len(resp), f, MaxAnswerFactor)
								}
							}
						}
					}
				}
			}
		})
	}
	t.Logf("the largest answer found: %.0f× (%s)", worst, worstShape)
}

// repeatItem is n copies of item, as a batch's evaluations.
func repeatItem(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// TestAuthZENRefusalCostIsLinear: a batch refused because what it has
// the pdp ignore passes the bound — undeclared properties in each item,
// in a default every item inherits, unknown members in each item — is
// refused where the bound is passed, while it is read: no evaluation is
// decided or signed (pdp_authzen_evaluations_total does not move), and
// what the refusal allocates is at most maxAllocPerByte a request byte
// and grows at most maxGrowthOnDoubling when the request doubles. Before,
// every item up to the bound was evaluated by the policy first: ×2.3 the
// bytes allocated for ×1.2 the request.
func TestAuthZENRefusalCostIsLinear(t *testing.T) {
	const maxAllocPerByte, maxGrowthOnDoubling = 160, 2.5
	e, tok := startTodo(t)
	sub := `{"type":"user","id":"CiRmZDA2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs"`
	shapes := []costShape{}
	for _, props := range []int{20, 40} {
		shapes = append(shapes, costShape{fmt.Sprintf("%d undeclared properties in each item", props), func(k int) string {
			return `{"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t"},"evaluations":[` +
				repeatItem(`{"subject":`+sub+`,"properties":{`+unknown(props)+`}}}`, 500*k) + `]}`
		}})
	}
	shapes = append(shapes,
		costShape{"undeclared properties in a default", func(k int) string {
			return `{"subject":` + sub + `,"properties":{` + unknown(2000*k) + `}},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t"},"evaluations":[` + repeatItem(`{}`, 500*k) + `]}`
		}},
		costShape{"unknown members in each item", func(k int) string {
			return `{"subject":` + sub + `},"action":{"name":"can_read_todos"},"resource":{"type":"todo","id":"t"},"evaluations":[` + repeatItem(`{`+unknown(30)+`}`, 500*k) + `]}`
		}})
	evaluated := func() float64 { return e.evaluationsAnswered(t) }
	before := evaluated()
	holdLinear(t, e, tok, shapes, maxAllocPerByte, maxGrowthOnDoubling, 400)
	if n := evaluated() - before; n != 0 {
		t.Errorf("%v evaluations were decided for batches refused for what they have ignored; want none", n)
	}
}

// TestAuthZENBatchStopsWithItsClient: a batch whose client has hung up
// is not evaluated on, nor signed, nor answered — as a search page.
func TestAuthZENBatchStopsWithItsClient(t *testing.T) {
	e, tok := startTodo(t)
	body := `{"subject":{"type":"user","id":"CiRmZDA2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs"},"action":{"name":"can_read_todos"},"evaluations":[` + items(pdp.MaxEvaluations) + `]}`
	answered := func() float64 { return e.evaluationsAnswered(t) }
	serve := func(ctx context.Context) *httptest.ResponseRecorder {
		return e.serveIn(ctx, tok, pdp.PathEvaluations, body)
	}
	if rec := serve(context.Background()); rec.Code != 200 || answered() != pdp.MaxEvaluations {
		t.Fatalf("a batch: %d, %v evaluations answered", rec.Code, answered())
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	before := answered()
	rec := serve(gone)
	if n := answered() - before; n != 0 || strings.Contains(rec.Body.String(), "callerauth") {
		t.Fatalf("a batch whose client had gone: %v evaluations answered, %.200q; want none and nothing signed", n, rec.Body.String())
	}
}

// evaluationsAnswered is pdp_authzen_evaluations_total, summed over its
// labels: the evaluations the pdp decided.
func (e *env) evaluationsAnswered(t *testing.T) float64 {
	t.Helper()
	n, err := scrape.Values(e.srv.Registry())
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for k, v := range n {
		if strings.HasPrefix(k, "pdp_authzen_evaluations_total") {
			sum += v
		}
	}
	return sum
}

// serveIn answers body at path through the pdp's handler, in ctx (one a
// test may have ended: a client that went away).
func (e *env) serveIn(ctx context.Context, tok, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	return rec
}
