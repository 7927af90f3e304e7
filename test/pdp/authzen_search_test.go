package pdp_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// searchVectors is one of the Search interop scenario's result files.
type searchVectors struct {
	Evaluation []struct {
		Request  json.RawMessage `json:"request"`
		Expected struct {
			Results []json.RawMessage `json:"results"`
		} `json:"expected"`
	} `json:"evaluation"`
}

// searchAnswer is a search page as the pdp answers it.
type searchAnswer struct {
	Page *struct {
		NextToken *string `json:"next_token"`
		Count     int     `json:"count"`
	} `json:"page"`
	Results []json.RawMessage `json:"results"`
}

// authzenCaller starts the dev issuer and a pdp serving the example in
// dir, and mints a token for the caller bound to the package.
func authzenCaller(t *testing.T, dir, packageID string, extra ...string) (*pdpProc, string, jose.JSONWebKeySet) {
	t.Helper()
	iss, _ := devissuertest.Serve(t, devissuer.Config{})
	p := startPackage(t, dir, "enforce", iss.KubeconfigFile(), packageID+"=system:serviceaccount:authzen:pep", extra...)
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "authzen", ServiceAccount: "pep", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var keys jose.JSONWebKeySet
	jb, _ := os.ReadFile(p.jwks)
	if err := json.Unmarshal(jb, &keys); err != nil || len(keys.Keys) == 0 {
		t.Fatalf("the pdp's JWKS: %v %s", err, jb)
	}
	return p, tok.Token, keys
}

// searchAll runs a search to its last page, page.limit at a time (0: no
// page object), verifying every page's signature against the request that
// asked it, and returns every result.
func searchAll(t *testing.T, p *pdpProc, token, path string, request json.RawMessage, limit int, keys jose.JSONWebKeySet) []json.RawMessage {
	t.Helper()
	var all []json.RawMessage
	var m map[string]any
	_ = json.Unmarshal(request, &m)
	token0 := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("%s %s: more than 100 pages", path, request)
		}
		page := map[string]any{}
		if limit > 0 {
			page["limit"] = limit
		}
		if token0 != "" {
			page["token"] = token0
		}
		if len(page) > 0 {
			m["page"] = page
		}
		body, _ := json.Marshal(m)
		code, resp := p.post(t, token, path, body)
		if code != 200 {
			t.Fatalf("%s %s: %d %s", path, body, code, resp)
		}
		if _, err := decision.VerifySearch(strings.TrimPrefix(path, "/access/v1/"), body, resp, decision.VerifyOptions{Profile: pdp.SearchProfile, Keys: keys}); err != nil {
			t.Fatalf("%s %s: the page does not verify: %v\n%s", path, body, err, resp)
		}
		var a searchAnswer
		if err := json.Unmarshal(resp, &a); err != nil || a.Results == nil || a.Page == nil || a.Page.NextToken == nil || a.Page.Count != len(a.Results) {
			t.Fatalf("%s: not a search page: %s", path, resp)
		}
		if limit > 0 && len(a.Results) > limit {
			t.Fatalf("%s: %d results on a page of %d", path, len(a.Results), limit)
		}
		all = append(all, a.Results...)
		if *a.Page.NextToken == "" {
			return all
		}
		token0 = *a.Page.NextToken
	}
}

// sameSet reports whether two lists of JSON values hold the same values.
func sameSet(a, b []json.RawMessage) bool {
	canon := func(list []json.RawMessage) []string {
		out := make([]string, len(list))
		for i, v := range list {
			c, _ := decision.Canonicalize(v)
			out[i] = string(c)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(canon(a), canon(b))
}

// TestAuthZENSearchInterop runs the public Search interop vectors (198:
// subject, resource and action search) through the real pdp over HTTPS
// with an authenticated caller, serving examples/authzen-search: each
// search in one page and again three results a page, following the
// tokens; every page verifies against its request, and every result the
// resource search returns is decided true by the evaluation endpoint.
func TestAuthZENSearchInterop(t *testing.T) {
	p, tok, keys := authzenCaller(t, "../../examples/authzen-search", "authzen-search")
	total := 0
	for _, c := range []struct{ file, path string }{
		{"subject.json", pdp.PathSearchSubject},
		{"resource.json", pdp.PathSearchResource},
		{"action.json", pdp.PathSearchAction},
	} {
		b, err := os.ReadFile("../testdata/authzen/search/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		var v searchVectors
		if err := json.Unmarshal(b, &v); err != nil || len(v.Evaluation) == 0 {
			t.Fatalf("%s: %v", c.file, err)
		}
		pass := 0
		for i, vec := range v.Evaluation {
			one := searchAll(t, p, tok, c.path, vec.Request, 0, keys)
			paged := searchAll(t, p, tok, c.path, vec.Request, 3, keys)
			if sameSet(one, vec.Expected.Results) && sameSet(paged, vec.Expected.Results) && len(paged) == len(one) {
				pass++
			} else {
				t.Errorf("%s %d %s:\n got %s\npaged %s\nwant %s", c.file, i, vec.Request, one, paged, vec.Expected.Results)
			}
			if c.path == pdp.PathSearchResource {
				// Each result, asked of the evaluation endpoint, is true (§8.1).
				var req map[string]json.RawMessage
				_ = json.Unmarshal(vec.Request, &req)
				var items []map[string]json.RawMessage
				for _, r := range one {
					items = append(items, map[string]json.RawMessage{"resource": r})
				}
				if len(items) == 0 {
					continue
				}
				body, _ := json.Marshal(map[string]any{"subject": req["subject"], "action": req["action"], "evaluations": items})
				code, resp := p.post(t, tok, pdp.PathEvaluations, body)
				_, leaves, err := decision.VerifyEvaluations("evaluations", body, resp, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys})
				if code != 200 || err != nil {
					t.Fatalf("evaluating the results: %d %v %s", code, err, resp)
				}
				for j, l := range leaves {
					if !l.Decision {
						t.Errorf("%s %d: result %s is decided false (%s)", c.file, i, one[j], l.Reason)
					}
				}
			}
		}
		total += len(v.Evaluation)
		t.Logf("%s: %d of %d as expected, in one page and three results a page", c.file, pass, len(v.Evaluation))
	}
	if total != 198 {
		t.Errorf("%d search vectors; the scenario has 198", total)
	}
}

// TestAuthZENSearchPagination: tokens are bound to the search (any other
// member changed is 400), a token not issued by the pdp is 400, a page
// stops at --authzen-search-max-candidates with a token however few
// results it holds, and an edited page does not verify.
func TestAuthZENSearchPagination(t *testing.T) {
	p, tok, keys := authzenCaller(t, "../../examples/authzen-search", "authzen-search",
		"--authzen-search-page-size", "5", "--authzen-search-max-candidates", "6")
	first := `{"subject":{"type":"user","id":"erin"},"action":{"name":"view"},"resource":{"type":"record"},"page":{"limit":2}}`
	code, resp := p.post(t, tok, pdp.PathSearchResource, []byte(first))
	var a searchAnswer
	_ = json.Unmarshal(resp, &a)
	if code != 200 || a.Page == nil || a.Page.NextToken == nil || *a.Page.NextToken == "" {
		t.Fatalf("the first page: %d %s", code, resp)
	}
	next := *a.Page.NextToken
	// The token re-encoded with the page moved on: its MAC no longer fits.
	payload, mac, _ := strings.Cut(next, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(payload)
	var moved map[string]any
	_ = json.Unmarshal(raw, &moved)
	moved["after"] = "record-119"
	raw, _ = json.Marshal(moved)
	shifted := base64.RawURLEncoding.EncodeToString(raw) + "." + mac
	for name, body := range map[string]string{
		"another subject": `{"subject":{"type":"user","id":"dan"},"action":{"name":"view"},"resource":{"type":"record"},"page":{"limit":2,"token":"` + next + `"}}`,
		"a context added": `{"subject":{"type":"user","id":"erin"},"action":{"name":"view"},"resource":{"type":"record"},"context":{"x":1},"page":{"limit":2,"token":"` + next + `"}}`,
		"a made-up token": `{"subject":{"type":"user","id":"erin"},"action":{"name":"view"},"resource":{"type":"record"},"page":{"limit":2,"token":"bm90IGEgdG9rZW4"}}`,
		"a shifted token": `{"subject":{"type":"user","id":"erin"},"action":{"name":"view"},"resource":{"type":"record"},"page":{"limit":2,"token":"` + shifted + `"}}`,
	} {
		if code, resp := p.post(t, tok, pdp.PathSearchResource, []byte(body)); code != 400 || !strings.Contains(string(resp), `"field":"page.token"`) {
			t.Errorf("%s: %d %s; want 400 naming page.token", name, code, resp)
		}
	}
	// Another page size on the way is the PEP's to ask (only the token
	// moves with the pages; page.limit is not the search's).
	if code, resp := p.post(t, tok, pdp.PathSearchResource, []byte(`{"subject":{"type":"user","id":"erin"},"action":{"name":"view"},"resource":{"type":"record"},"page":{"limit":3,"token":"`+next+`"}}`)); code != 200 {
		t.Errorf("another page.limit with the token: %d %s; want 200", code, resp)
	}
	// erin (Finance, employee) views 105, 111 and 117 (her own) and 115
	// (Finance) only: a page evaluates at most 6 candidates, so the 20
	// records take four pages, each but the last with a token.
	var pages []int
	all := []json.RawMessage{}
	token := ""
	for len(pages) < 10 {
		body := `{"subject":{"type":"user","id":"erin"},"action":{"name":"view"},"resource":{"type":"record"}`
		if token != "" {
			body += `,"page":{"token":"` + token + `"}`
		}
		body += "}"
		code, resp := p.post(t, tok, pdp.PathSearchResource, []byte(body))
		if code != 200 {
			t.Fatalf("%d %s", code, resp)
		}
		if _, err := decision.VerifySearch("search/resource", []byte(body), resp, decision.VerifyOptions{Profile: pdp.SearchProfile, Keys: keys}); err != nil {
			t.Fatal(err)
		}
		var a searchAnswer
		_ = json.Unmarshal(resp, &a)
		pages = append(pages, len(a.Results))
		all = append(all, a.Results...)
		if token = *a.Page.NextToken; token == "" {
			break
		}
	}
	var want []json.RawMessage
	for _, id := range []string{"105", "111", "115", "117"} {
		want = append(want, json.RawMessage(`{"type":"record","id":"`+id+`"}`))
	}
	if !slices.Equal(pages, []int{1, 1, 2, 0}) || !sameSet(all, want) {
		t.Errorf("pages of %v results, %s; want pages of 1, 1, 2, 0 (6 candidates each) holding 105, 111, 115, 117", pages, all)
	}
	// An edited page does not verify: a result added, the token changed.
	_, resp = p.post(t, tok, pdp.PathSearchResource, []byte(first))
	for name, edit := range map[string]func(string) string{
		"a result added": func(s string) string {
			return strings.Replace(s, `"results":[`, `"results":[{"type":"record","id":"999"},`, 1)
		},
		"the token moved": func(s string) string { return strings.Replace(s, `"next_token":"`, `"next_token":"x`, 1) },
		"the count":       func(s string) string { return strings.Replace(s, `"count":1`, `"count":9`, 1) },
	} {
		edited := edit(string(resp))
		if edited == string(resp) {
			t.Fatalf("%s: the edit changed nothing in %s", name, resp)
		}
		if _, err := decision.VerifySearch("search/resource", []byte(first), []byte(edited), decision.VerifyOptions{Profile: pdp.SearchProfile, Keys: keys}); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	if _, err := decision.VerifySearch("search/resource", []byte(strings.Replace(first, "erin", "dan", 1)), resp, decision.VerifyOptions{Profile: pdp.SearchProfile, Keys: keys}); err == nil {
		t.Error("a page verified against another request")
	}
	// The X-Request-ID is echoed and bound.
	req, _ := http.NewRequest(http.MethodPost, p.url+pdp.PathSearchSubject, bytes.NewReader([]byte(`{"subject":{"type":"user"},"action":{"name":"edit"},"resource":{"type":"record","id":"101"}}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set(pdp.HeaderRequestID, "search-7")
	hr, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(hr.Body)
	if hr.Header.Get(pdp.HeaderRequestID) != "search-7" {
		t.Errorf("X-Request-ID not echoed: %q", hr.Header.Get(pdp.HeaderRequestID))
	}
	if _, err := decision.VerifySearch("search/subject", []byte(`{"subject":{"type":"user"},"action":{"name":"edit"},"resource":{"type":"record","id":"101"}}`), buf.Bytes(),
		decision.VerifyOptions{Profile: pdp.SearchProfile, Keys: keys, RequestID: "search-8"}); err == nil {
		t.Error("a page verified under another X-Request-ID")
	}
}

// TestAuthZENSearchFollowUpAsWritten: the certification scenario's C-4-5-2
// sends its follow-up with page.token and without the first request's
// page.limit; sent verbatim, it is answered with the next page (before:
// 400 "page.token belongs to another search").
func TestAuthZENSearchFollowUpAsWritten(t *testing.T) {
	p, tok, _ := authzenCaller(t, "../../examples/authzen-certification", "authzen-certification")
	first := `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"},"page":{"limit":1}}`
	code, resp := p.post(t, tok, pdp.PathSearchSubject, []byte(first))
	var a searchAnswer
	if err := json.Unmarshal(resp, &a); code != 200 || err != nil || a.Page == nil || a.Page.NextToken == nil || *a.Page.NextToken == "" || len(a.Results) != 1 {
		t.Fatalf("C-4-5-1: %d %s", code, resp)
	}
	follow := `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"record-1"},"page":{"token":"` + *a.Page.NextToken + `"}}`
	code, resp = p.post(t, tok, pdp.PathSearchSubject, []byte(follow))
	var b searchAnswer
	if err := json.Unmarshal(resp, &b); code != 200 || err != nil || len(b.Results) != 1 || string(b.Results[0]) == string(a.Results[0]) {
		t.Fatalf("C-4-5-2 as written: %d %s; want the next page", code, resp)
	}
}

// TestAuthZENSearchWorkIsBounded: each candidate's evaluation reads the
// whole template, so a page of a large template evaluates proportionally
// fewer candidates (--authzen-search-max-candidates for a template up to
// pdp.SearchWorkUnit bytes, at least one) and ends with a token. Before,
// an 18 KB subject with undeclared properties cost ~50 s of CPU: every
// candidate × every property × a linear search of the ignored list.
func TestAuthZENSearchWorkIsBounded(t *testing.T) {
	p, tok, _ := authzenCaller(t, "../../examples/authzen-search", "authzen-search", "--authzen-search-page-size", "5", "--authzen-search-max-candidates", "6")
	after := func(body string) string {
		t.Helper()
		code, resp := p.post(t, tok, pdp.PathSearchResource, []byte(body))
		var a searchAnswer
		if err := json.Unmarshal(resp, &a); code != 200 || err != nil || a.Page == nil || a.Page.NextToken == nil || *a.Page.NextToken == "" {
			t.Fatalf("%d %.300s; want a page with a token", code, resp)
		}
		payload, _, _ := strings.Cut(*a.Page.NextToken, ".")
		raw, _ := base64.RawURLEncoding.DecodeString(payload)
		var tk struct{ After string }
		_ = json.Unmarshal(raw, &tk)
		return tk.After
	}
	small := after(`{"subject":{"type":"user","id":"erin"},"action":{"name":"view"},"resource":{"type":"record"},"page":{"limit":100}}`)
	var props []string
	for i := range 1000 {
		props = append(props, fmt.Sprintf(`"p%d":%d`, i, i))
	}
	large := `{"subject":{"type":"user","id":"erin","properties":{` + strings.Join(props, ",") + `}},"action":{"name":"view"},"resource":{"type":"record"},"page":{"limit":100}}`
	big := after(large)
	t.Logf("a page of a small template ends after %q, of a %d-byte one after %q", small, len(large), big)
	if small <= big {
		t.Fatalf("a %d-byte template evaluated as many candidates as a small one (after %q, %q)", len(large), big, small)
	}
}
