package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	search "github.com/callerauth/callerauth/examples/authzen-search"
	"github.com/callerauth/callerauth/examples/todo"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

// The pdp answering AuthZEN (docs/pdp.md#authzen) with the Todo example:
// a batch of two evaluations, signed once, each answer verified alone.

const todoPrincipal = "system:serviceaccount:todo:todo-backend"

func pdpAuthZENBatch(ctx context.Context, e *env) Result {
	r := Result{Scenario: "pdp AuthZEN: a batch of two evaluations", Expected: "allow + deny, one signature, each item verified on its own"}
	s, url, stop, err := e.servePDP("authzen", todo.WriteTo, callers.ModeEnforce, "todo="+todoPrincipal)
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	tok, err := e.iss.Mint(devissuer.TokenRequest{Namespace: "todo", ServiceAccount: "todo-backend", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		return fail(r, err)
	}
	// Morty, an editor, may update his own todo and not Rick's.
	subject := fmt.Sprintf(`{"type":"user","id":%q}`, todo.Morty)
	action := `{"name":"can_update_todo"}`
	resources := []string{
		`{"type":"todo","id":"t-1","properties":{"ownerID":"morty@the-citadel.com"}}`,
		`{"type":"todo","id":"t-2","properties":{"ownerID":"rick@the-citadel.com"}}`,
	}
	body := fmt.Sprintf(`{"subject":%s,"action":%s,"evaluations":[{"resource":%s},{"resource":%s}]}`, subject, action, resources[0], resources[1])
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+pdp.PathEvaluations, bytes.NewReader([]byte(body)))
	if err != nil {
		return fail(r, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fail(r, err)
	}
	defer resp.Body.Close()
	var out struct {
		Evaluations []json.RawMessage `json:"evaluations"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Evaluations) != 2 {
		return fail(r, fmt.Errorf("%d, %d answers: %w", resp.StatusCode, len(out.Evaluations), err))
	}
	keys := s.EvaluationSigner().JWKS()
	sigs := map[string]bool{}
	var got []string
	for i, a := range out.Evaluations {
		// Each item alone: its own answer, the request it answers.
		one := fmt.Sprintf(`{"subject":%s,"action":%s,"resource":%s}`, subject, action, resources[i])
		rec, leaf, err := decision.VerifyEvaluation(a, decision.VerifyOptions{Profile: pdp.EvaluationProfile, Keys: keys, Request: []byte(one)})
		if err != nil {
			return fail(r, fmt.Errorf("item %d: %w", i, err))
		}
		var p struct {
			Context map[string]decision.EvaluationProof `json:"context"`
		}
		_ = json.Unmarshal(a, &p)
		sigs[p.Context[decision.ContextKey].RecordJWS] = true
		got = append(got, fmt.Sprintf("%t %s (verified, %d of %d, caller %s)", leaf.Decision, leaf.Reason, leaf.Index+1, rec.Evaluations, strings.TrimPrefix(rec.Caller.Principal, "system:serviceaccount:")))
		r.Pass = rec.Caller.Principal == todoPrincipal
	}
	r.Observed = fmt.Sprintf("%s; %s; %d signature", got[0], got[1], len(sigs))
	r.Pass = r.Pass && len(sigs) == 1 && got[0][:4] == "true" && got[1][:5] == "false"
	return r
}

// pdpAuthZENSearch: the Search scenario (examples/authzen-search) — which
// records may alice edit — in pages of two, every page verified against
// the request that asked it.
func pdpAuthZENSearch(ctx context.Context, e *env) Result {
	r := Result{Scenario: "pdp AuthZEN: a resource search, two results a page", Expected: "alice may edit 101 107 110 113 119; every page signed and verified"}
	s, url, stop, err := e.servePDP("authzen-search", search.WriteTo, callers.ModeEnforce, "authzen-search="+todoPrincipal)
	if err != nil {
		return fail(r, err)
	}
	defer stop()
	tok, err := e.iss.Mint(devissuer.TokenRequest{Namespace: "todo", ServiceAccount: "todo-backend", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		return fail(r, err)
	}
	keys := s.Signer().JWKS()
	var ids []string
	token, pages := "", 0
	for pages < 20 {
		page := `{"limit":2}`
		if token != "" {
			page = fmt.Sprintf(`{"limit":2,"token":%q}`, token)
		}
		body := []byte(`{"subject":{"type":"user","id":"alice"},"action":{"name":"edit"},"resource":{"type":"record"},"page":` + page + `}`)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+pdp.PathSearchResource, bytes.NewReader(body))
		if err != nil {
			return fail(r, err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fail(r, err)
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			return fail(r, fmt.Errorf("page %d: %d %s", pages+1, resp.StatusCode, buf.String()))
		}
		if _, err := decision.VerifySearch("search/resource", body, buf.Bytes(), decision.VerifyOptions{Profile: pdp.SearchProfile, Keys: keys}); err != nil {
			return fail(r, fmt.Errorf("page %d: %w", pages+1, err))
		}
		var out struct {
			Page struct {
				NextToken string `json:"next_token"`
			} `json:"page"`
			Results []struct{ ID string } `json:"results"`
		}
		if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
			return fail(r, err)
		}
		for _, x := range out.Results {
			ids = append(ids, x.ID)
		}
		pages++
		if token = out.Page.NextToken; token == "" {
			break
		}
	}
	r.Observed = fmt.Sprintf("%s in %d pages, each verified", strings.Join(ids, " "), pages)
	r.Pass = strings.Join(ids, " ") == "101 107 110 113 119"
	return r
}
