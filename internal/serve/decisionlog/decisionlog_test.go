package decisionlog_test

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/serve/decisionlog"
)

func TestChecksRefuseWhatCannotBeHonoured(t *testing.T) {
	base := decisionlog.NewOptions()
	if base.On() || base.Check() != nil {
		t.Fatalf("the defaults: on %v, %v", base.On(), base.Check())
	}
	for want, edit := range map[string]func(*decisionlog.Options){
		"--decision-log-key-file belongs to --decision-log": func(o *decisionlog.Options) { o.KeyFile = "k" },
		"needs --decision-log-key-file":                     func(o *decisionlog.Options) { o.Dir = "log" },
		"--decision-log-mode \"sometimes\"":                 func(o *decisionlog.Options) { o.Dir, o.KeyFile, o.Mode = "log", "k", "sometimes" },
		"--decision-log-caller-max-entries 0":               func(o *decisionlog.Options) { o.Dir, o.KeyFile, o.CallerMaxEntries = "log", "k", 0 },
		"--decision-log-queue 0":                            func(o *decisionlog.Options) { o.Dir, o.KeyFile, o.Queue = "log", "k", 0 },
		"want 0 (no bound) or more":                         func(o *decisionlog.Options) { o.Dir, o.KeyFile, o.MaxAge = "log", "k", -time.Second },
	} {
		o := decisionlog.NewOptions()
		edit(&o)
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", o, err, want)
		}
	}
}

// TestAnswersKept: an answer is kept as it is, inside its entry; one too
// large for an entry by its digest.
func TestAnswersKept(t *testing.T) {
	ctx := context.Background()
	c := completed(t, nil)
	l, stop := started(t, "svc", c)
	defer stop()

	small := []byte(`{"record":{"effect":"allow","note":"a \"quoted\" word"}}` + "\n")
	large := []byte(`{"evaluations":[` + strings.Repeat(`{"decision":true},`, 4000) + `{"decision":true}]}`)
	for _, answer := range [][]byte{small, large} {
		if refusal, err := l.Keep(ctx, decisionlog.Decision{Caller: "c", Allowed: true, Path: "/v1/check", Status: 200, Answer: answer, At: time.Now()}); !refusal.IsZero() {
			t.Fatalf("Keep: %v %v", refusal, err)
		}
	}
	for i, answer := range [][]byte{small, large} {
		data, err := l.Translog().Entry(int64(i))
		if err != nil {
			t.Fatal(err)
		}
		s := struct{ Data []byte }{data}
		if !json.Valid(s.Data) {
			t.Fatalf("entry %d is not JSON: %s", i, s.Data)
		}
		var e struct {
			Answer       json.RawMessage `json:"answer"`
			AnswerDigest string          `json:"answer_digest"`
			AnswerBytes  int             `json:"answer_bytes"`
		}
		_ = json.Unmarshal(s.Data, &e)
		trimmed := []byte(strings.TrimSpace(string(answer)))
		if len(s.Data) > translog.MaxEntryBytes {
			t.Fatalf("entry %d is %d bytes", i, len(s.Data))
		}
		if i == 0 && string(e.Answer) != string(trimmed) {
			t.Errorf("the answer kept as %s, want %s", e.Answer, trimmed)
		}
		sum := sha256.Sum256(trimmed)
		if i == 1 && (e.Answer != nil || e.AnswerDigest != "sha256:"+hex.EncodeToString(sum[:]) || e.AnswerBytes != len(trimmed)) {
			t.Errorf("a %d-byte answer kept as %.200s", len(large), s.Data)
		}
	}
}

// opaEvent is an event of OPA's decision-log service API as its
// documentation describes one: what a consumer of OPA's logs decodes.
type opaEvent struct {
	Labels     map[string]string `json:"labels"`
	DecisionID string            `json:"decision_id"`
	Path       string            `json:"path"`
	Input      map[string]any    `json:"input"`
	Result     any               `json:"result"`
	Timestamp  time.Time         `json:"timestamp"`
}

// TestSinkShipsOPAsFormat: committed decisions reach an HTTP sink as OPA
// sends its decision logs — POSTs of gzip-compressed JSON arrays — through
// failures retried with backoff.
func TestSinkShipsOPAsFormat(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var got []opaEvent
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/logs" || r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not OPA's decision-log API", http.StatusBadRequest)
			return
		}
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var batch []opaEvent
		if err := json.NewDecoder(z).Decode(&batch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = append(got, batch...)
	}))
	defer srv.Close()
	c := completed(t, func(o *decisionlog.Options, _ string) { o.Sink, o.SinkEvery = srv.URL+"/logs", 50*time.Millisecond })
	l, stop := started(t, "pdp", c)
	defer stop()
	for i := range 3 {
		if refusal, err := l.Keep(ctx, decisionlog.Decision{Caller: fmt.Sprintf("c%d", i), System: "secrets-engine", Allowed: i != 1, Reason: "r", Path: "/v1/check", Status: 200,
			Answer: []byte(`{"record":{"n":` + fmt.Sprint(i) + `}}`), At: time.Now()}); !refusal.IsZero() {
			t.Fatal(refusal, err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop() // the sink ships what is left as it stops
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || calls < 3 {
		t.Fatalf("%d events in %d POSTs: %+v", len(got), calls, got)
	}
	for i, e := range got {
		r, _ := e.Result.(map[string]any)
		if e.Labels["app"] != "callerauth-pdp" || e.Labels["id"] == "" || e.DecisionID != fmt.Sprintf("svc.test/decisions/%d", i) ||
			e.Path != "callerauth/pdp/v1/check" || e.Input["caller"] != fmt.Sprintf("c%d", i) || e.Timestamp.IsZero() || r["allowed"] != (i != 1) || r["answer"] == nil {
			t.Errorf("event %d: %+v", i, e)
		}
	}
}

func TestSinkRefusesPlaintextElsewhere(t *testing.T) {
	for _, sink := range []string{"http://logs.example.com/logs", "ftp://x/logs", "https://user:pw@x/logs"} {
		o := decisionlog.NewOptions()
		o.Dir, o.KeyFile, o.Sink = "log", "k", sink
		if err := o.Check(); err == nil {
			t.Errorf("--decision-log-sink %s was accepted", sink)
		}
	}
	o := decisionlog.NewOptions()
	o.Dir, o.KeyFile, o.Sink, o.SinkTokenFile = "log", "k", "http://127.0.0.1:1/logs", "t"
	if err := o.Check(); err == nil {
		t.Error("a token for a plain http:// sink was accepted")
	}
}

// TestSearchRebuiltFromTheLog: the search index follows the log; dropped,
// it is built again from the log, finding what it found before; an index
// of another log's past (the log started again in an empty directory)
// is dropped and built again on its own.
func TestSearchRebuiltFromTheLog(t *testing.T) {
	ctx := context.Background()
	c := completed(t, func(o *decisionlog.Options, dir string) { o.Search = filepath.Join(dir, "search.db") })
	// run opens the log, keeps n decisions of callers c0…c4, waits until
	// the index holds the log, and returns what a search for c3 finds.
	run := func(n int) []decisionlog.Found {
		t.Helper()
		l, stop := started(t, "svc", c)
		defer stop()
		for i := range n {
			if refusal, err := l.Keep(ctx, decisionlog.Decision{Caller: fmt.Sprintf("c%d", i%5), Allowed: true, Path: "/v1/check", Status: 200, At: time.Now()}); !refusal.IsZero() {
				t.Fatal(refusal, err)
			}
		}
		wait, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		if err := l.Indexed(wait); err != nil {
			t.Fatal(err)
		}
		found, err := l.Find(ctx, decisionlog.Query{Caller: "c3", Limit: decisionlog.MaxSearch})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	indexes := func(fs []decisionlog.Found) []int64 {
		var out []int64
		for _, f := range fs {
			out = append(out, f.Index)
		}
		return out
	}
	first := run(600)
	if len(first) != 120 {
		t.Fatalf("c3 holds %d decisions, want 120", len(first))
	}
	for _, f := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(c.SearchTarget + f); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	again := run(0)
	if fmt.Sprint(indexes(again)) != fmt.Sprint(indexes(first)) {
		t.Fatalf("built again from the log, the index finds %v; before, %v", indexes(again), indexes(first))
	}
	for i := range again {
		if string(again[i].Data) != string(first[i].Data) {
			t.Fatalf("decision %d reads otherwise, built again", again[i].Index)
		}
	}
	// The log started again from nothing, under the old index.
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Fatal(err)
	}
	fresh := run(10)
	if len(fresh) != 2 || fresh[0].Index != 3 || fresh[1].Index != 8 {
		t.Fatalf("a new log under an old index finds %v, want [3 8]", indexes(fresh))
	}
}

// started opens service's decision log and runs it until stop, which
// also closes it.
func started(t *testing.T, service string, c decisionlog.Config) (*decisionlog.Log, func()) {
	t.Helper()
	l, err := decisionlog.Open(context.Background(), service, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Start(ctx); close(done) }()
	var once sync.Once
	return l, func() { once.Do(func() { cancel(); <-done; _ = l.Close() }) }
}

// completed is a log's configuration in a new directory with
// a checkpoint key of svc.test/decisions, after edit changed its options.
func completed(t *testing.T, edit func(o *decisionlog.Options, dir string)) decisionlog.Config {
	t.Helper()
	dir := t.TempDir()
	skey, _, err := note.GenerateKey(rand.Reader, "svc.test/decisions")
	if err != nil {
		t.Fatal(err)
	}
	o := decisionlog.NewOptions()
	o.Dir, o.KeyFile = filepath.Join(dir, "log"), filepath.Join(dir, "log.key")
	if err := os.WriteFile(o.KeyFile, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&o, dir)
	}
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
