// Package benchcompare measures callerauth beside its peers in one run on
// one machine — the pdp against OPA serving the same policy under the same
// load, and the paired Go benchmarks of each package — and reports each
// row as a ratio, with this run's absolute figures beside it (make
// bench-compare; docs/performance.md).
package benchcompare

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	search "github.com/callerauth/callerauth/examples/authzen-search"
	secretsengine "github.com/callerauth/callerauth/examples/secrets-engine"
	"github.com/callerauth/callerauth/examples/todo"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/proc"
	"github.com/callerauth/callerauth/internal/tools/loadgen"
)

// Server is a process serving on a loopback address.
type Server struct {
	Name string
	URL  string // base URL
	proc *proc.Process
}

// Stop ends the process.
func (s *Server) Stop() {
	if s.proc != nil {
		_ = s.proc.Stop()
	}
}

// start runs bin with args and waits until GET base+ready answers 200 (or
// ctx ends).
func start(ctx context.Context, name, bin, addr, ready string, args ...string) (*Server, error) {
	s := &Server{Name: name, URL: "http://" + addr}
	var err error
	if s.proc, err = proc.Start(proc.Spec{Bin: bin, Args: args}); err != nil {
		return nil, fmt.Errorf("benchcompare: %w", err)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(s.URL + ready)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
	}
	s.Stop()
	return nil, fmt.Errorf("benchcompare: %s did not become ready: %s", name, s.proc.Output())
}

// Peers are the servers of the HTTP comparison.
type Peers struct {
	PDP, PDPAuthOff, OPA *Server
	// PDPLog is PDP keeping its decision log (--decision-log, a directory) in
	// the default mode, required: what keeping every decision costs when
	// no answer leaves before its decision is committed. PDPLogBestEffort
	// keeps it best-effort (queued, committed in the background).
	PDPLog, PDPLogBestEffort *Server
	// OPAMinimal is OPA serving the catalog rule as an OPA user would
	// write it (examples/secrets-engine/rego/minimal.rego): no registry.
	OPAMinimal *Server
	// AuthZEN is a pdp serving examples/todo over AuthZEN, caller
	// authentication on.
	AuthZEN *Server
	// Search is a pdp serving examples/authzen-search (the Search
	// scenario), caller authentication on.
	Search *Server
	// Empty answers every request with a fixed body: net/http's floor.
	Empty *Server
	// PDPMetrics is the host:port of PDP's metrics listener.
	PDPMetrics string
	Token      string // a caller token the pdp accepts
	TodoToken  string // one the AuthZEN pdps accept
	stop       func()
}

// Close stops every server.
func (p *Peers) Close() { p.stop() }

// StartPeers starts, under dir: the dev issuer (the pdp's TokenReview
// backend), the pdp with caller authentication and signing, the pdp with
// --insecure-caller-auth-off, OPA serving the example policy in Rego
// (examples/secrets-engine/rego) over the registry in OPA's shape, and OPA
// serving minimal.rego beside regoFile.
func StartPeers(ctx context.Context, dir, pdpBin, opaBin, emptyBin, regoFile string) (*Peers, error) {
	var servers []*Server
	var stops []func()
	p := &Peers{stop: func() {
		for _, s := range servers {
			s.Stop()
		}
		for _, f := range stops {
			f()
		}
	}}
	fail := func(err error) (*Peers, error) { p.Close(); return nil, err }
	iss, err := devissuer.Open(filepath.Join(dir, "issuer"), devissuer.Config{})
	if err != nil {
		return nil, err
	}
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { _ = srv.Close() })
	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: "secrets-engine", Audiences: []string{"flex-auth"}, Lifetime: time.Hour})
	if err != nil {
		return fail(err)
	}
	p.Token = tok.Token
	todoTok, err := iss.Mint(devissuer.TokenRequest{Namespace: "todo", ServiceAccount: "todo-backend", Audiences: []string{"flex-auth"}, Lifetime: time.Hour})
	if err != nil {
		return fail(err)
	}
	p.TodoToken = todoTok.Token
	todoPolicy, todoRegistry, err := todo.WriteTo(filepath.Join(dir, "todo"))
	if err != nil {
		return fail(err)
	}
	searchPolicy, searchRegistry, err := search.WriteTo(filepath.Join(dir, "search"))
	if err != nil {
		return fail(err)
	}
	policyDir, registry, err := secretsengine.WriteTo(filepath.Join(dir, "example"))
	if err != nil {
		return fail(err)
	}
	key := filepath.Join(dir, "signing.pem")
	if err := decision.GenerateKeyFile(key); err != nil {
		return fail(err)
	}
	common := []string{"--insecure-http", "--metrics-listen", "", "--signing-key-file", key, "--log-level", "error"}
	logKey := filepath.Join(dir, "decisions.key")
	skey, _, err := note.GenerateKey(rand.Reader, "pdp.bench/decisions")
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(logKey, []byte(skey+"\n"), 0o600); err != nil {
		return fail(err)
	}
	for _, mode := range []string{"enforce", "off", "authzen", "search", "log", "log-best-effort"} {
		addr, err := loopback.Addr()
		if err != nil {
			return fail(err)
		}
		args := append([]string{"--listen", addr}, common...)
		name := "pdp"
		switch mode {
		case "off":
			name = "pdp --insecure-caller-auth-off"
			args = append(args, "--policy-dir", policyDir, "--registry", registry, "--caller-auth-mode", "off", "--insecure-caller-auth-off")
		case "authzen":
			name = "pdp AuthZEN"
			args = append(args, "--policy-dir", todoPolicy, "--registry", todoRegistry,
				"--kubeconfig", iss.KubeconfigFile(), "--caller-binding", "todo=system:serviceaccount:todo:todo-backend")
		case "search":
			name = "pdp AuthZEN search"
			args = append(args, "--policy-dir", searchPolicy, "--registry", searchRegistry,
				"--kubeconfig", iss.KubeconfigFile(), "--caller-binding", "authzen-search=system:serviceaccount:todo:todo-backend")
		case "log", "log-best-effort":
			logMode := strings.TrimPrefix(strings.TrimPrefix(mode, "log"), "-")
			if logMode == "" {
				logMode = "required"
			}
			name = "pdp with its decision log (" + logMode + ")"
			args = append(args, "--policy-dir", policyDir, "--registry", registry,
				"--kubeconfig", iss.KubeconfigFile(), "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine",
				"--decision-log", filepath.Join(dir, mode), "--decision-log-key-file", logKey, "--decision-log-mode", logMode,
				"--decision-log-caller-max-entries", "1000000000")
		default:
			if p.PDPMetrics, err = loopback.Addr(); err != nil {
				return fail(err)
			}
			args = append(args, "--policy-dir", policyDir, "--registry", registry, "--metrics-listen", p.PDPMetrics,
				"--kubeconfig", iss.KubeconfigFile(), "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine")
		}
		s, err := start(ctx, name, pdpBin, addr, "/readyz", args...)
		if err != nil {
			return fail(err)
		}
		servers = append(servers, s)
		switch mode {
		case "off":
			p.PDPAuthOff = s
		case "authzen":
			p.AuthZEN = s
		case "search":
			p.Search = s
		case "log":
			p.PDPLog = s
		case "log-best-effort":
			p.PDPLogBestEffort = s
		default:
			p.PDP = s
		}
	}
	data, err := OPAData(registry)
	if err != nil {
		return fail(err)
	}
	dataFile := filepath.Join(dir, "data.json")
	if err := os.WriteFile(dataFile, data, 0o600); err != nil {
		return fail(err)
	}
	addr, err := loopback.Addr()
	if err != nil {
		return fail(err)
	}
	s, err := start(ctx, "OPA", opaBin, addr, "/health", "run", "--server", "--addr", addr, "--log-level", "error", regoFile, dataFile)
	if err != nil {
		return fail(err)
	}
	servers = append(servers, s)
	p.OPA = s
	if addr, err = loopback.Addr(); err != nil {
		return fail(err)
	}
	if s, err = start(ctx, "OPA minimal", opaBin, addr, "/health", "run", "--server", "--addr", addr, "--log-level", "error", filepath.Join(filepath.Dir(regoFile), "minimal.rego")); err != nil {
		return fail(err)
	}
	servers = append(servers, s)
	p.OPAMinimal = s
	if emptyBin != "" {
		addr, err := loopback.Addr()
		if err != nil {
			return fail(err)
		}
		e, err := start(ctx, "empty", emptyBin, addr, "/", "--listen", addr)
		if err != nil {
			return fail(err)
		}
		servers = append(servers, e)
		p.Empty = e
	}
	return p, nil
}

// SigningGroups reads the pdp's pdp_signing_group_records: the /v1/check
// records it has signed, and the signatures it made for them (group-commit
// signing shares one among the records that wait while one is made).
func (p *Peers) SigningGroups(ctx context.Context) (records, signatures float64, err error) {
	b, err := get(ctx, "http://"+p.PDPMetrics+"/metrics")
	if err != nil {
		return 0, 0, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return 0, 0, fmt.Errorf("benchcompare: the pdp's metrics: %w", err)
	}
	mf, ok := mfs["pdp_signing_group_records"]
	if !ok || len(mf.GetMetric()) == 0 {
		return 0, 0, errors.New("benchcompare: the pdp exports no pdp_signing_group_records")
	}
	h := mf.GetMetric()[0].GetHistogram()
	return h.GetSampleSum(), float64(h.GetSampleCount()), nil
}

func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 4<<20))
}

// OPAData is the registry (Cedar entities) in the shape the Rego policy
// reads: {"registry": {"tenants": {t: true}, "lanes": {l: tenant},
// "subjects": {s: [lanes]}, "resources": {r: lane}}}. Derived, so the two
// cannot drift.
func OPAData(registry string) ([]byte, error) {
	b, err := os.ReadFile(registry)
	if err != nil {
		return nil, err
	}
	var entities []types.Entity
	if err := json.Unmarshal(b, &entities); err != nil {
		return nil, fmt.Errorf("benchcompare: %s: %w", registry, err)
	}
	reg := map[string]any{"tenants": map[string]bool{}, "lanes": map[string]string{}, "subjects": map[string][]string{}, "resources": map[string]string{}}
	for _, e := range entities {
		var parents []string
		for p := range e.Parents.All() {
			parents = append(parents, string(p.ID))
		}
		id := string(e.UID.ID)
		switch e.UID.Type {
		case "Tenant":
			reg["tenants"].(map[string]bool)[id] = true
		case "Lane":
			if len(parents) != 1 {
				return nil, fmt.Errorf("benchcompare: lane %s has %d tenants", id, len(parents))
			}
			reg["lanes"].(map[string]string)[id] = parents[0]
		case "Subject":
			reg["subjects"].(map[string][]string)[id] = parents
		case "Resource":
			if len(parents) != 1 {
				return nil, fmt.Errorf("benchcompare: resource %s has %d lanes", id, len(parents))
			}
			reg["resources"].(map[string]string)[id] = parents[0]
		}
	}
	return json.Marshal(map[string]any{"registry": reg})
}

// Verdict is a decision as both peers state it.
type Verdict struct {
	Allow  bool
	Reason string
}

// AskPDP posts a check to a pdp and reads the effect and reason.
func AskPDP(ctx context.Context, s *Server, token string, req []byte) (Verdict, error) {
	h := http.Header{"Content-Type": {"application/json"}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	body, err := post(ctx, s.URL+"/v1/check", h, req)
	if err != nil {
		return Verdict{}, err
	}
	var signed struct {
		Record struct {
			Effect, Reason string
		} `json:"record"`
	}
	if err := json.Unmarshal(body, &signed); err != nil || signed.Record.Effect == "" {
		return Verdict{}, fmt.Errorf("benchcompare: the pdp answered %s", body)
	}
	return Verdict{Allow: signed.Record.Effect == decision.Allow, Reason: signed.Record.Reason}, nil
}

// AskOPA posts the same request as OPA's input and reads the decision.
func AskOPA(ctx context.Context, s *Server, req []byte) (Verdict, error) {
	body, err := post(ctx, s.URL+"/v1/data/secretsengine/decision", http.Header{"Content-Type": {"application/json"}}, opaInput(req))
	if err != nil {
		return Verdict{}, err
	}
	var out struct {
		Result *struct {
			Allow  bool   `json:"allow"`
			Reason string `json:"reason"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Result == nil {
		return Verdict{}, fmt.Errorf("benchcompare: OPA answered %s", body)
	}
	return Verdict{Allow: out.Result.Allow, Reason: out.Result.Reason}, nil
}

func opaInput(req []byte) []byte { return []byte(`{"input":` + string(req) + `}`) }

func post(ctx context.Context, url string, h http.Header, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("benchcompare: %s: %s: %s", url, resp.Status, b)
	}
	return b, err
}

// Requests are the check requests the agreement covers: the two examples
// and one for each registry reason and policy branch.
func Requests() [][]byte {
	base := map[string]any{}
	_ = json.Unmarshal(secretsengine.AllowRequest(), &base)
	with := func(changes map[string]any) []byte {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	return [][]byte{
		secretsengine.AllowRequest(), secretsengine.DenyRequest(),
		with(map[string]any{"tenant": "evil-corp", "lane": "billing"}),
		with(map[string]any{"lane": "nowhere"}),
		with(map[string]any{"tenant": "globex"}),
		with(map[string]any{"subject": "svc-unknown"}),
		with(map[string]any{"resource": "nothing"}),
		with(map[string]any{"resource": "invoice-db"}),
		with(map[string]any{"stage": "delete"}),
		with(map[string]any{"stage": "read"}),
		with(map[string]any{"system": "another-system"}),
		with(map[string]any{"fields": []string{"password", "username"}}),
		with(map[string]any{"fields": []string{}}),
		with(map[string]any{"lane": "billing", "resource": "invoice-db"}),
		with(map[string]any{"subject": "svc-payroll"}),
		with(map[string]any{"resource": "tls-key", "fields": []string{"private_key"}}),
	}
}

// Agree asks the pdp (caller authentication off: the policy alone) and OPA
// every request of Requests and returns an error naming each that they
// decide differently.
func Agree(ctx context.Context, p *Peers) (int, error) {
	var errs []error
	for _, req := range Requests() {
		ours, err := AskPDP(ctx, p.PDPAuthOff, "", req)
		if err != nil {
			return 0, err
		}
		theirs, err := AskOPA(ctx, p.OPA, req)
		if err != nil {
			return 0, err
		}
		if ours != theirs {
			errs = append(errs, fmt.Errorf("%s: pdp %+v, OPA %+v", req, ours, theirs))
		}
	}
	return len(Requests()), errors.Join(errs...)
}

// Load is one HTTP load row's measurements.
type Load struct {
	Name      string
	Role      string // "pdp", "pdp-off", "authzen", "opa", "opa-minimal" or "floor"
	Decisions int    // decisions per request (an AuthZEN batch: its size)
	Result    loadgen.Result
	// CPUPerRequest is the server process's own CPU time (user and
	// system, from /proc) per answered request: the load generator,
	// sharing the machine, cannot blur it. The least of the rounds.
	CPUPerRequest time.Duration
	// Rounds are each round's figures, in order: round i of every load
	// was measured in turn, so the ratio of two loads' round i is one
	// round's ratio (Row.Low, Row.High).
	Rounds []Round
	server *Server
}

// Round is one round of a load.
type Round struct {
	Result        loadgen.Result
	CPUPerRequest time.Duration
}

// DecisionsPerSecond is the load's throughput in decisions.
func (l Load) DecisionsPerSecond() float64 {
	return l.Result.PerSecond() * float64(max(1, l.Decisions))
}

// SearchCandidates are the records a resource search of the Search
// scenario evaluates: each is one decision.
const SearchCandidates = 20

// searchResults checks a search page holds n results.
func searchResults(n int) func(int, []byte) error {
	return func(status int, body []byte) error {
		if status != http.StatusOK || bytes.Count(body, []byte(`"type":"record"`)) != n {
			return fmt.Errorf("the AuthZEN search pdp answered %d %.200s", status, body)
		}
		return nil
	}
}

// authzenBody is a batch of n evaluations of the Todo example (Morty
// updating his own todo: allowed), or one evaluation for n = 0.
func authzenBody(n int) []byte {
	const subject = `"subject":{"type":"user","id":"` + todo.Morty + `"},"action":{"name":"can_update_todo"}`
	const resource = `"resource":{"type":"todo","id":"t","properties":{"ownerID":"morty@the-citadel.com"}}`
	if n == 0 {
		return []byte("{" + subject + "," + resource + "}")
	}
	items := make([]string, n)
	for i := range items {
		items[i] = "{" + resource + "}"
	}
	return []byte("{" + subject + `,"evaluations":[` + strings.Join(items, ",") + "]}")
}

// LoadAll drives the pdp (with and without caller authentication) and OPA
// with the allow example, one after the other, under the same load; every
// answer must be the allow.
func LoadAll(ctx context.Context, p *Peers, conns int, d time.Duration, rounds int) ([]Load, error) {
	req := secretsengine.AllowRequest()
	allowPDP := func(status int, body []byte) error {
		if status != http.StatusOK || !bytes.Contains(body, []byte(`"effect":"allow"`)) {
			return fmt.Errorf("pdp answered %d %.200s", status, body)
		}
		return nil
	}
	allowOPA := func(status int, body []byte) error {
		if status != http.StatusOK || !bytes.Contains(body, []byte(`"allow":true`)) {
			return fmt.Errorf("OPA answered %d %.200s", status, body)
		}
		return nil
	}
	allowAll := func(n int) func(int, []byte) error {
		return func(status int, body []byte) error {
			if status != http.StatusOK || bytes.Count(body, []byte(`"decision":true`)) != n {
				return fmt.Errorf("the AuthZEN pdp answered %d %.200s", status, body)
			}
			return nil
		}
	}
	azHeader := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + p.TodoToken}}
	type run struct {
		name, role string
		decisions  int
		server     *Server
		cfg        loadgen.Config
		check      func(int, []byte) error
	}
	runs := []run{
		{"pdp: caller auth (cached TokenReview) + ES256 record", "pdp", 1, p.PDP, loadgen.Config{URL: p.PDP.URL + "/v1/check", Body: req,
			Header: http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + p.Token}}}, allowPDP},
		{"pdp: --insecure-caller-auth-off, ES256 record", "pdp-off", 1, p.PDPAuthOff, loadgen.Config{URL: p.PDPAuthOff.URL + "/v1/check", Body: req,
			Header: http.Header{"Content-Type": {"application/json"}}}, allowPDP},
		{"pdp AuthZEN: one evaluation, caller auth + signed", "authzen", 1, p.AuthZEN, loadgen.Config{URL: p.AuthZEN.URL + "/access/v1/evaluation", Body: authzenBody(0), Header: azHeader}, allowAll(1)},
		{"pdp AuthZEN: batches of 10, caller auth + one signature each", "authzen", 10, p.AuthZEN, loadgen.Config{URL: p.AuthZEN.URL + "/access/v1/evaluations", Body: authzenBody(10), Header: azHeader}, allowAll(10)},
		{"pdp AuthZEN: batches of 100, caller auth + one signature each", "authzen", 100, p.AuthZEN, loadgen.Config{URL: p.AuthZEN.URL + "/access/v1/evaluations", Body: authzenBody(100), Header: azHeader}, allowAll(100)},
		{"pdp AuthZEN: resource search, 20 candidates a page, caller auth + one signature", "authzen", SearchCandidates, p.Search, loadgen.Config{URL: p.Search.URL + "/access/v1/search/resource",
			Body: []byte(`{"subject":{"type":"user","id":"alice"},"action":{"name":"edit"},"resource":{"type":"record"}}`), Header: azHeader}, searchResults(5)},
		{"OPA " + OPAVersion + ": same policy in Rego", "opa", 1, p.OPA, loadgen.Config{URL: p.OPA.URL + "/v1/data/secretsengine/decision", Body: opaInput(req),
			Header: http.Header{"Content-Type": {"application/json"}}}, allowOPA},
		{"OPA " + OPAVersion + ": the minimal rule (minimal.rego)", "opa-minimal", 1, p.OPAMinimal, loadgen.Config{URL: p.OPAMinimal.URL + "/v1/data/secretsengine/minimal/decision", Body: opaInput(req),
			Header: http.Header{"Content-Type": {"application/json"}}}, allowOPA},
	}
	if p.Empty != nil {
		runs = append(runs, run{"net/http empty handler (the floor)", "floor", 1, p.Empty, loadgen.Config{URL: p.Empty.URL + "/", Body: req, Header: http.Header{"Content-Type": {"application/json"}}}, allowOPA})
	}
	loads := make([]Load, len(runs))
	cfgs := make([]loadgen.Config, len(runs))
	for i, r := range runs {
		r.cfg.Connections, r.cfg.Check = conns, r.check
		cfgs[i] = r.cfg
		loads[i] = Load{Name: r.name, Role: r.role, Decisions: r.decisions, server: r.server}
	}
	return interleaved(ctx, loads, cfgs, d, rounds)
}

// interleaved runs each load's configuration in rounds — every load once
// a round, in turn, for d/rounds each — and keeps each load's fastest
// round: what slows a shared machine for a while (another tenant, steal)
// then falls on every peer alike, and only lowers figures, never raises
// them. Every answer of every round is checked.
func interleaved(ctx context.Context, loads []Load, cfgs []loadgen.Config, d time.Duration, rounds int) ([]Load, error) {
	rounds = max(1, rounds)
	for range rounds {
		for i := range loads {
			cfg := cfgs[i]
			cfg.Duration = d / time.Duration(rounds)
			// The server's CPU time over the measured window alone (the
			// warm-up before it is not counted, nor its requests).
			var before, after time.Duration
			var cpuErr error
			read := func(into *time.Duration) func() {
				return func() {
					v, err := loads[i].server.CPU()
					*into = v
					if err != nil && cpuErr == nil {
						cpuErr = err
					}
				}
			}
			cfg.AtStart, cfg.AtEnd = read(&before), read(&after)
			res, err := loadgen.Run(ctx, cfg)
			if err != nil {
				return nil, err
			}
			if cpuErr != nil {
				return nil, cpuErr
			}
			if res.Errors > 0 || res.Requests == 0 {
				return nil, fmt.Errorf("benchcompare: %s: %d answered, %d wrong: %w", loads[i].Name, res.Requests, res.Errors, res.FirstError)
			}
			if res.PerSecond() > loads[i].Result.PerSecond() {
				loads[i].Result = res
			}
			per := (after - before) / time.Duration(res.Requests)
			if loads[i].CPUPerRequest == 0 || per < loads[i].CPUPerRequest {
				loads[i].CPUPerRequest = per
			}
			loads[i].Rounds = append(loads[i].Rounds, Round{Result: res, CPUPerRequest: per})
		}
	}
	return loads, nil
}

// LatencyLoads drives the pdp (caller authentication on, signed records)
// and OPA with the allow example at each number of connections, one after
// the other, for the latency rows: p50 and p99 at low and high
// concurrency, not only throughput.
func LatencyLoads(ctx context.Context, p *Peers, conns []int, d time.Duration, rounds int) ([]Load, error) {
	req := secretsengine.AllowRequest()
	var loads []Load
	var cfgs []loadgen.Config
	for _, c := range conns {
		for _, r := range []struct {
			name, role string
			server     *Server
			cfg        loadgen.Config
			want       string
		}{
			{fmt.Sprintf("pdp at %d connections", c), "pdp", p.PDP, loadgen.Config{URL: p.PDP.URL + "/v1/check", Body: req,
				Header: http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + p.Token}}}, `"effect":"allow"`},
			{fmt.Sprintf("pdp with its decision log at %d connections", c), "pdp-log", p.PDPLog, loadgen.Config{URL: p.PDPLog.URL + "/v1/check", Body: req,
				Header: http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + p.Token}}}, `"effect":"allow"`},
			{fmt.Sprintf("pdp with its decision log, best-effort, at %d connections", c), "pdp-log-best-effort", p.PDPLogBestEffort, loadgen.Config{URL: p.PDPLogBestEffort.URL + "/v1/check", Body: req,
				Header: http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + p.Token}}}, `"effect":"allow"`},
			{fmt.Sprintf("OPA at %d connections", c), "opa", p.OPA, loadgen.Config{URL: p.OPA.URL + "/v1/data/secretsengine/decision", Body: opaInput(req),
				Header: http.Header{"Content-Type": {"application/json"}}}, `"allow":true`},
			{fmt.Sprintf("OPA, the minimal rule, at %d connections", c), "opa-minimal", p.OPAMinimal, loadgen.Config{URL: p.OPAMinimal.URL + "/v1/data/secretsengine/minimal/decision", Body: opaInput(req),
				Header: http.Header{"Content-Type": {"application/json"}}}, `"allow":true`},
		} {
			want := []byte(r.want)
			r.cfg.Connections = c
			r.cfg.Check = func(status int, body []byte) error {
				if status != http.StatusOK || !bytes.Contains(body, want) {
					return fmt.Errorf("%s answered %d %.200s", r.name, status, body)
				}
				return nil
			}
			loads = append(loads, Load{Name: r.name, Role: r.role, Decisions: c, server: r.server})
			cfgs = append(cfgs, r.cfg)
		}
	}
	return interleaved(ctx, loads, cfgs, d, rounds)
}

// CPU is the process's CPU time so far, user and system: the sum of its
// threads' time on a CPU in nanoseconds (/proc/<pid>/task/*/schedstat),
// else from /proc/<pid>/stat in clock ticks.
func (s *Server) CPU() (time.Duration, error) {
	if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.proc.Pid())); err == nil {
		var ns int64
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", s.proc.Pid(), t.Name()))
			if err != nil {
				continue // a thread that ended meanwhile
			}
			if f := strings.Fields(string(b)); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				ns += n
			}
		}
		if ns > 0 {
			return time.Duration(ns), nil
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.proc.Pid()))
	if err != nil {
		return 0, fmt.Errorf("benchcompare: %s's CPU time: %w", s.Name, err)
	}
	// The command name may hold spaces: the fields follow its ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("benchcompare: %s: /proc stat has %d fields", s.Name, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("benchcompare: %s: /proc stat times %q %q", s.Name, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / time.Duration(clockTicks()), nil
}

// clockTicks is the kernel's USER_HZ (getconf CLK_TCK; 100 on Linux).
var clockTicks = sync.OnceValue(func() int64 {
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
})

// OPAVersion is the OPA the Makefile builds.
const OPAVersion = "v1.22.3"

// shortName trims a benchmark name's GOMAXPROCS suffix.
func shortName(s string) string {
	if i := strings.LastIndex(s, "-"); i > 0 {
		return s[:i]
	}
	return s
}
