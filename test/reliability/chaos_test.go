package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/sys/unix"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// validator is the dev issuer on a fixed loopback address, which the test
// stops and starts again: the API server going away and coming back. Its
// state (keys, reviewer token, kubeconfig) survives a restart.
type validator struct {
	iss      *devissuer.Issuer
	addr     string
	srv      *devissuer.Server
	restarts []time.Time
}

func startValidator(t *testing.T) *validator {
	t.Helper()
	iss, err := devissuer.Open(t.TempDir(), devissuer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := iss.Serve("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	v := &validator{iss: iss, srv: srv, addr: strings.TrimPrefix(srv.URL, "https://")}
	t.Cleanup(func() {
		if v.srv != nil {
			_ = v.srv.Close()
		}
	})
	return v
}

func (v *validator) stop(t *testing.T) {
	t.Helper()
	if err := v.srv.Close(); err != nil {
		t.Errorf("stopping the validator: %v", err)
	}
	v.srv = nil
}

func (v *validator) start(t *testing.T) {
	t.Helper()
	srv, err := v.iss.Serve(v.addr, nil)
	if err != nil {
		t.Fatalf("restarting the validator on %s: %v", v.addr, err)
	}
	v.srv = srv
	v.restarts = append(v.restarts, time.Now())
}

// recovery is, for each return (of the validator, of the datastore), how
// long until the first success after it: of a request that started after
// it (byStart), or that ended after it.
func recovery(returns []time.Time, successes []span, byStart bool) []time.Duration {
	var out []time.Duration
	for _, r := range returns {
		best := time.Duration(-1)
		for _, s := range successes {
			at := s.end
			if byStart {
				at = s.start
			}
			if !at.Before(r) && (best < 0 || s.end.Sub(r) < best) {
				best = s.end.Sub(r)
			}
		}
		out = append(out, best)
	}
	return out
}

type span struct{ start, end time.Time }

// minRequests is how many requests a chaos run answers at least: the load
// goes on past the script until it has, however slow the machine.
const minRequests = 2000

// pdpAnswer is one answer of the pdp under chaos.
type pdpAnswer struct {
	span
	fresh   bool // the token was minted for this request: it needed the validator
	req     int  // 0 allow, 1 deny
	code    int
	reason  string // refusals
	kid     string // 200s
	version string // 200s: the policy version the record names
	body    []byte
}

// TestChaosPDP runs the real pdp under several concurrent clients while the
// validator is stopped and restarted twice, the policy is reloaded twice and
// the signing key is rotated (published first, then signing): every answer
// is a signed decision or a documented refusal, every record verifies with
// `callerauth decision verify` against the key set a consumer pinned after
// the new key was published, and the service recovers by itself within one
// cache TTL of the validator's return.
func TestChaosPDP(t *testing.T) {
	const cacheTTL = 4 * time.Second
	v := startValidator(t)
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policy")
	if err := os.CopyFS(policyDir, os.DirFS(filepath.Join(example, "policy"))); err != nil {
		t.Fatal(err)
	}
	oldKey, newKey := genKey(t, dir, "old.pem"), genKey(t, dir, "new.pem")
	keyFile := filepath.Join(dir, "signing.pem")
	writeAtomic(t, keyFile, oldKey)
	p := e2e.Start(t, pdpBin, []string{"--listen", "127.0.0.1:0", "--insecure-http", "--metrics-listen", "127.0.0.1:0",
		"--policy-dir", policyDir, "--registry", filepath.Join(example, "registry.json"), "--reload-interval", "100ms",
		"--kubeconfig", v.iss.KubeconfigFile(), "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine",
		"--signing-key-file", keyFile, "--caller-cache-ttl", cacheTTL.String(), "--caller-review-timeout", "1s"})
	addr := p.LogValue(t, "pdp: serving", "address", 60*time.Second)
	requests := [2][]byte{readFile(t, filepath.Join(example, "check_request_allow_rotate.json")), readFile(t, filepath.Join(example, "check_request_deny_private_key.json"))}
	wantEffect := [2]string{"allow", "deny"}
	mint := func() string {
		tok, err := v.iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: "secrets-engine", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
		if err != nil {
			t.Error(err)
		}
		return tok.Token
	}
	jwks := func() jose.JSONWebKeySet {
		var set jose.JSONWebKeySet
		resp, err := http.Get("http://" + addr + "/.well-known/jwks.json")
		if err == nil {
			defer resp.Body.Close()
			_ = json.NewDecoder(resp.Body).Decode(&set)
		}
		return set
	}
	oldKid := jwks().Keys[0].KeyID

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var mu sync.Mutex
	var answers []pdpAnswer
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fresh := c >= 2 // clients 0 and 1 keep one token, cached; the others mint one per request
			tok := mint()
			for i := 0; ctx.Err() == nil; i++ {
				if fresh {
					tok = mint()
				}
				a := pdpAnswer{fresh: fresh, req: (c + i) % 2}
				a.start = time.Now()
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/check", bytes.NewReader(requests[a.req]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					a.reason = "no answer: " + err.Error()
				} else {
					a.code = resp.StatusCode
					a.body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				a.end = time.Now()
				a.decode()
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				time.Sleep(4 * time.Millisecond)
			}
		}()
	}

	// The chaos, on a fixed script while the clients run.
	var pinned jose.JSONWebKeySet
	var signSwitch time.Time
	newKid := ""
	waitJWKS := func(ok func(jose.JSONWebKeySet) bool) jose.JSONWebKeySet {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if set := jwks(); ok(set) {
				return set
			}
		}
		t.Fatal("the pdp never published the rotated key set")
		return jose.JSONWebKeySet{}
	}
	var events []string
	at := func(what string) {
		events = append(events, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), what))
	}
	script := []func(){
		func() { at("validator stopped"); v.stop(t) },
		func() { v.start(t); at("validator back") },
		func() { at("policy v3"); writeManifest(t, policyDir, "v3") },
		func() {
			at("new key published")
			writeAtomic(t, keyFile, append(append([]byte{}, newKey...), oldKey...))
			pinned = waitJWKS(func(s jose.JSONWebKeySet) bool { return len(s.Keys) == 2 })
			newKid = pinned.Keys[0].KeyID
		},
		func() { at("validator stopped"); v.stop(t) },
		func() { v.start(t); at("validator back") },
		func() {
			at("new key signs")
			signSwitch = time.Now()
			writeAtomic(t, keyFile, append(append([]byte{}, oldKey...), newKey...))
			waitJWKS(func(s jose.JSONWebKeySet) bool { return len(s.Keys) == 2 && s.Keys[1].KeyID == newKid })
		},
		func() { at("policy v4"); writeManifest(t, policyDir, "v4") },
	}
	time.Sleep(500 * time.Millisecond)
	for _, step := range script {
		step()
		time.Sleep(700 * time.Millisecond)
	}
	time.Sleep(cacheTTL) // the load goes on for one more TTL after the last change
	// and until a few thousand requests have been answered: a count, not a
	// rate, so that a loaded machine takes longer rather than fails.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := len(answers)
		mu.Unlock()
		if n >= minRequests {
			break
		}
	}
	stopLoad()
	wg.Wait()

	// Every answer is definite: a signed decision of the right effect, or a
	// refusal with a reason the pdp documents for a validator outage.
	byAnswer := map[string]int{}
	var freshOK []span
	var ok [2][][]byte
	versions := map[string]int{}
	for _, a := range answers {
		key := fmt.Sprintf("%d %s", a.code, a.reason)
		switch {
		case a.code == 200 && a.kid != "":
			key = "200 " + wantEffect[a.req]
			if !strings.Contains(string(a.body), `"effect":"`+wantEffect[a.req]+`"`) {
				key = "200 WRONG EFFECT"
			}
			ok[a.req] = append(ok[a.req], a.body)
			versions[a.version]++
			if a.fresh {
				freshOK = append(freshOK, a.span)
			}
			if a.kid == newKid && a.end.Before(signSwitch) {
				t.Errorf("a record signed by the new key %s was answered at %s, before the switch to it at %s", newKid, a.end.Format(time.StampMicro), signSwitch.Format(time.StampMicro))
			}
			if a.kid != oldKid && a.kid != newKid {
				t.Errorf("a record signed by an unknown key %q", a.kid)
			}
		case a.code == 503 && a.reason == "validator_unavailable":
		default:
			key = "INDEFINITE " + key
		}
		byAnswer[key]++
	}
	rec := recovery(v.restarts, freshOK, true)

	// Every 200 verifies with the consumer's CLI against the pinned set.
	pinnedFile := filepath.Join(dir, "pinned-jwks.json")
	b, _ := json.Marshal(pinned)
	writeAtomic(t, pinnedFile, b)
	verified := 0
	for r, bodies := range ok {
		if len(bodies) == 0 {
			continue
		}
		rdir := t.TempDir()
		reqFile := filepath.Join(rdir, "request.json")
		writeAtomic(t, reqFile, requests[r])
		var files []string
		for i, body := range bodies {
			f := filepath.Join(rdir, fmt.Sprintf("%05d.json", i))
			writeAtomic(t, f, body)
			files = append(files, f)
		}
		out, err := exec.Command(callerauthBin, append([]string{"decision", "verify", "--jwks", pinnedFile, "--request", reqFile}, files...)...).CombinedOutput()
		want := fmt.Sprintf("%d of %d verified", len(files), len(files))
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("callerauth decision verify of the %s records: %v; want %q\n%s", wantEffect[r], err, want, lastLines(string(out), 5))
		} else {
			verified += len(files)
		}
	}

	t.Logf("chaos script: %s", strings.Join(events, "; "))
	t.Logf("%-34s %s", "requests", fmt.Sprint(len(answers)))
	for _, k := range sortedKeys(byAnswer) {
		t.Logf("%-34s %d", "answer "+k, byAnswer[k])
	}
	for _, k := range sortedKeys(versions) {
		t.Logf("%-34s %d", "records of policy "+k, versions[k])
	}
	t.Logf("%-34s %d of %d (callerauth decision verify, key set pinned after publishing)", "records verified", verified, len(ok[0])+len(ok[1]))
	for i, d := range rec {
		t.Logf("%-34s %s (cache TTL %s)", fmt.Sprintf("recovery after validator return %d", i+1), d.Round(time.Millisecond), cacheTTL)
	}

	for k, n := range byAnswer {
		if strings.HasPrefix(k, "INDEFINITE") || strings.Contains(k, "WRONG") {
			t.Errorf("%d answers %q: want only signed decisions of the right effect or 503 validator_unavailable", n, k)
		}
	}
	if byAnswer["503 validator_unavailable"] == 0 {
		t.Error("no request was refused while the validator was down: the outage was not exercised")
	}
	for _, ver := range []string{"v2", "v3", "v4"} {
		if versions[ver] == 0 {
			t.Errorf("no record names policy %s: the reloads were not exercised (%v)", ver, versions)
		}
	}
	for i, d := range rec {
		if d < 0 || d > cacheTTL {
			t.Errorf("validator return %d: recovered after %s; want within one cache TTL (%s)", i+1, d, cacheTTL)
		}
	}
	if len(answers) < minRequests {
		t.Errorf("only %d requests in two minutes: want %d", len(answers), minRequests)
	}
}

func (a *pdpAnswer) decode() {
	if a.code == 0 {
		return
	}
	if a.code != http.StatusOK {
		var e struct{ Reason string }
		_ = json.Unmarshal(a.body, &e)
		a.reason = e.Reason
		return
	}
	var s decision.Signed
	var r struct {
		PolicyVersion string `json:"policy_version"`
	}
	if json.Unmarshal(a.body, &s) != nil || json.Unmarshal(s.Record, &r) != nil {
		return
	}
	a.version = r.PolicyVersion
	if jws, err := jose.ParseSignedCompact(s.JWS(), []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA}); err == nil && len(jws.Signatures) == 1 {
		a.kid = jws.Signatures[0].Header.KeyID
	}
}

func genKey(t *testing.T, dir, name string) []byte {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := decision.GenerateKeyFile(path); err != nil {
		t.Fatal(err)
	}
	return readFile(t, path)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeAtomic replaces a file by renaming a new one over it, as a
// ConfigMap or Secret volume update does: a reader sees the old file or the
// new one, never half of it.
func writeAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func writeManifest(t *testing.T, dir, version string) {
	t.Helper()
	writeAtomic(t, filepath.Join(dir, "manifest.json"), []byte(`{"package_id":"secrets-engine","policy_version":"`+version+`"}`))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestChaosConnector runs the real platform-connector, in each role, under
// concurrent publishers (half of them send each batch with a freshly minted
// token, so each needs the validator; the others keep theirs) while the validator is stopped and restarted twice
// and the datastore refuses writes for a while: every batch a publisher
// sends with PublishRetrying is stored exactly once — counted in the
// database — and publishing resumes by itself within one cache TTL.
//
// The datastore fault is RLIMIT_FSIZE 0 set on the running connector with
// prlimit(2): every write to a regular file then fails with EFBIG, which is
// what SQLite sees of a read-only or full volume. (chmod cannot do it: the
// connector holds its files open, and root ignores modes; a read-only
// remount is refused while a file on it is open for writing.)
func TestChaosConnector(t *testing.T) {
	for _, role := range []string{"socket", "deployment"} {
		t.Run(role, func(t *testing.T) { chaosConnector(t, role) })
	}
}

func chaosConnector(t *testing.T, role string) {
	const (
		cacheTTL   = 4 * time.Second
		aud        = "platform-connector.nvsentinel.nvidia.com"
		publishers = 6
		perBatch   = 4
	)
	v := startValidator(t)
	dir := t.TempDir()
	datastore := filepath.Join(dir, "events.db")
	c := newConnectorSetup(t, v, dir, role, aud, datastore, "--caller-cache-ttl", cacheTTL.String(), "--caller-review-timeout", "1s")
	args, env, cred, node := c.args, c.env, c.cred, c.node
	if role == "socket" {
		cred.Address = "unix://" + c.sock
	}
	p := e2e.Start(t, connectorBin, args, env...)
	metrics := p.LogValue(t, "connector: serving", "metrics", 60*time.Second)
	if role == "deployment" {
		cred.Address = p.LogValue(t, "connector: serving", "address", time.Second)
	}
	before := scrapeAt(t, metrics)

	type batch struct {
		span
		fresh bool // sent with a token minted for it
		ids   []string
		err   error
	}
	var mu sync.Mutex
	var batches []batch
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range publishers {
		tokenFile := filepath.Join(dir, fmt.Sprintf("token-%d", i))
		mint := func() {
			tok, err := v.iss.Mint(devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-health-monitor", Pod: fmt.Sprintf("monitor-%d", i), Node: node(i), Audiences: []string{aud}, Lifetime: 10 * time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			writeAtomic(t, tokenFile, []byte(tok.Token))
		}
		mint()
		c := cred
		c.TokenFile = tokenFile
		pub, err := connector.NewPublisher(c)
		if err != nil {
			t.Fatal(err)
		}
		pub.Backoff, pub.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pub.Close()
			for j := 0; ctx.Err() == nil; j++ {
				if i%2 == 0 {
					mint() // a fresh token: this batch needs the validator
				} // the others keep theirs, verified again once per cache TTL
				b := batch{fresh: i%2 == 0}
				var evs []*pcv1.HealthEvent
				for k := range perBatch {
					id := fmt.Sprintf("p%d-b%d-e%d", i, j, k)
					b.ids = append(b.ids, id)
					evs = append(evs, &pcv1.HealthEvent{Version: 1, Agent: "chaos", CheckName: "GpuXid", Message: id, NodeName: node(i), IsFatal: true})
				}
				pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				b.start = time.Now()
				b.err = pub.PublishRetrying(pctx, evs...)
				b.end = time.Now()
				cancel()
				mu.Lock()
				batches = append(batches, b)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	var events []string
	at := func(what string) {
		events = append(events, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), what))
	}
	var restored []time.Time
	pid := p.Pid()
	var lim unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, nil, &lim); err != nil {
		t.Fatalf("reading the connector's RLIMIT_FSIZE: %v", err)
	}
	script := []func(){
		func() { at("validator stopped"); v.stop(t) },
		func() { v.start(t); at("validator back") },
		func() {
			at("datastore refuses writes")
			if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 0, Max: lim.Max}, nil); err != nil {
				t.Fatalf("prlimit: %v", err)
			}
		},
		func() {
			if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &lim, nil); err != nil {
				t.Fatalf("prlimit: %v", err)
			}
			restored = append(restored, time.Now())
			at("datastore restored")
		},
		func() { at("validator stopped"); v.stop(t) },
		func() { v.start(t); at("validator back") },
	}
	time.Sleep(500 * time.Millisecond)
	for _, step := range script {
		step()
		time.Sleep(900 * time.Millisecond)
	}
	time.Sleep(cacheTTL)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := len(batches)
		mu.Unlock()
		if n >= minRequests {
			break
		}
	}
	stopLoad()
	wg.Wait()
	after := scrapeAt(t, metrics)

	var failed int
	var successes, freshSuccesses []span
	var delivered [][]string
	for _, b := range batches {
		if b.err != nil {
			failed++
			t.Errorf("a batch was not delivered: %v", b.err)
			continue
		}
		successes = append(successes, b.span)
		if b.fresh {
			freshSuccesses = append(freshSuccesses, b.span)
		}
		delivered = append(delivered, b.ids)
	}
	l := tallyStore(t, datastore, delivered)
	sent, lost, dups, extra := l.acknowledged, l.lost, l.duplicated, l.unacknowledged // extra: stored, though its publisher was told it failed
	d := func(name string) int { return int(after[name] - before[name]) }
	requests := d("platform_connector_auth_decisions_total") + d("platform_connector_auth_violations_total")

	t.Logf("chaos script: %s", strings.Join(events, "; "))
	t.Logf("%-44s %d (%d batches of %d events, %d publishers)", "requests (attempts)", requests, len(batches), perBatch, publishers)
	t.Logf("%-44s %d", "answer OK (batch stored)", len(batches)-failed)
	t.Logf("%-44s %d", "answer Unavailable validator_unavailable", d(`platform_connector_auth_violations_total{reason="validator_unavailable"}`))
	t.Logf("%-44s %d", "answer Unavailable datastore unavailable", d("platform_connector_datastore_failures_total"))
	for _, k := range sortedKeys(after) {
		if strings.HasPrefix(k, "platform_connector_auth_violations_total{") && !strings.Contains(k, "validator_unavailable") && after[k] != before[k] {
			t.Logf("%-44s %d", "answer "+k, int(after[k]-before[k]))
		}
	}
	t.Logf("%-44s %d sent, %d stored, %d lost, %d duplicates, %d stored but reported failed", "events", sent, l.stored, lost, dups, extra)
	for i, r := range recovery(v.restarts, freshSuccesses, false) {
		t.Logf("%-44s %s (cache TTL %s)", fmt.Sprintf("recovery after validator return %d", i+1), r.Round(time.Millisecond), cacheTTL)
		if r < 0 || r > cacheTTL {
			t.Errorf("validator return %d: publishing resumed after %s; want within one cache TTL (%s)", i+1, r, cacheTTL)
		}
	}
	for _, r := range recovery(restored, successes, false) {
		t.Logf("%-44s %s", "recovery after the datastore's", r.Round(time.Millisecond))
		if r < 0 || r > cacheTTL {
			t.Errorf("publishing resumed %s after the datastore was restored; want within one cache TTL (%s)", r, cacheTTL)
		}
	}

	if lost != 0 || dups != 0 || extra != 0 || failed != 0 {
		t.Errorf("%d events lost, %d duplicated, %d stored but reported failed, %d batches not delivered; want none", lost, dups, extra, failed)
	}
	if got := d("platform_connector_events_stored_total"); got != l.stored {
		t.Errorf("platform_connector_events_stored_total rose by %d; the database holds %d", got, l.stored)
	}
	if d(`platform_connector_auth_violations_total{reason="validator_unavailable"}`) == 0 {
		t.Error("no batch was refused while the validator was down: the outage was not exercised")
	}
	if d("platform_connector_datastore_failures_total") == 0 {
		t.Error("no batch failed while the datastore refused writes: the fault was not exercised")
	}
	if len(batches) < minRequests {
		t.Errorf("only %d batches in two minutes: want %d", len(batches), minRequests)
	}
}

// ledger is what a connector's datastore holds against what its
// publishers were told.
type ledger struct {
	acknowledged   int // events of the batches answered OK
	stored         int // events in the datastore
	lost           int // acknowledged, not stored
	duplicated     int // stored more than once (each extra copy)
	unacknowledged int // stored, though no acknowledged batch held them
}

// tallyStore counts every event in datastore by its message (each event's
// unique id) against the ids of the acknowledged batches.
func tallyStore(t *testing.T, datastore string, acknowledged [][]string) ledger {
	t.Helper()
	s, err := connector.OpenStore(datastore)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.List(context.Background(), "", 1<<30)
	_ = s.Close()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range stored {
		count[e.Event.GetMessage()]++
	}
	l := ledger{stored: len(stored)}
	want := map[string]bool{}
	for _, ids := range acknowledged {
		for _, id := range ids {
			l.acknowledged++
			want[id] = true
			switch n := count[id]; {
			case n == 0:
				l.lost++
			case n > 1:
				l.duplicated += n - 1
			}
		}
	}
	for id := range count {
		if !want[id] {
			l.unacknowledged++
		}
	}
	return l
}

// connectorSetup is how the chaos tests run a connector of a role: its
// flags and environment, the publishers' credentials (without an address
// for the socket role's proxy to decide), each publisher's node, and the
// socket role's socket.
type connectorSetup struct {
	args, env []string
	cred      credentials.Config
	node      func(publisher int) string
	sock      string
}

// newConnectorSetup writes the connector's configuration (node binding,
// enforce, fail-closed) for aud into dir: the socket role on a socket in
// dir as NODE_NAME node-a (every publisher there), the deployment role on
// a loopback port with TLS from a CA of its own (publisher i on node-i).
func newConnectorSetup(t *testing.T, v *validator, dir, role, aud, datastore string, extra ...string) connectorSetup {
	t.Helper()
	config := filepath.Join(dir, "config.json")
	writeAtomic(t, config, []byte(`{"enableNodeBindingAuth": true, "AuthAudience": "`+aud+`", "AuthCrossNodeServiceAccounts": [], "AuthMode": "enforce", "AuthFailOpenOnUnavailable": false}`))
	c := connectorSetup{
		args: append([]string{"--role", role, "--config", config, "--datastore", datastore, "--metrics-listen", "127.0.0.1:0", "--kubeconfig", v.iss.KubeconfigFile()}, extra...),
		node: func(int) string { return "node-a" },
	}
	if role == "socket" {
		c.sock = filepath.Join(dir, "pc.sock")
		c.args = append(c.args, "--socket", c.sock)
		c.env = append(c.env, "NODE_NAME=node-a")
		return c
	}
	ca, err := pki.NewCA("chaos")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("localhost", pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeAtomic(t, certFile, certPEM)
	writeAtomic(t, keyFile, keyPEM)
	if c.cred.CAFile, err = ca.WriteCA(filepath.Join(dir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	c.args = append(c.args, "--listen", "127.0.0.1:0", "--tls-cert-file", certFile, "--tls-key-file", keyFile)
	c.cred.TLS, c.cred.ServerName = true, "localhost"
	c.node = func(i int) string { return fmt.Sprintf("node-%d", i) }
	return c
}

// scrapeAt reads a Prometheus text endpoint into "name{labels}" → value, and
// the sum of each family under its bare name.
func scrapeAt(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	m, err := metricsAt(addr)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func metricsAt(addr string) (map[string]float64, error) {
	mfs, err := scrape.Families(addr)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if len(labels) > 0 {
				out[name+"{"+strings.Join(labels, ",")+"}"] = v
			}
			out[name] += v
		}
	}
	return out, nil
}
