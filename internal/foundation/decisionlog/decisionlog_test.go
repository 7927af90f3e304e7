package decisionlog_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/internal/foundation/decisionlog"
	"github.com/callerauth/callerauth/internal/foundation/translog"
)

func TestChecksRefuseWhatCannotBeHonoured(t *testing.T) {
	base := decisionlog.NewOptions()
	if base.On() || base.Check() != nil {
		t.Fatalf("the defaults: on %v, %v", base.On(), base.Check())
	}
	for want, edit := range map[string]func(*decisionlog.Options){
		"--decision-log-key-file belongs to --decision-log": func(o *decisionlog.Options) { o.KeyFile = "k" },
		"needs --decision-log-key-file":                     func(o *decisionlog.Options) { o.Datastore = "x.db" },
		"--decision-log-mode \"sometimes\"":                 func(o *decisionlog.Options) { o.Datastore, o.KeyFile, o.Mode = "x.db", "k", "sometimes" },
		"--decision-log-caller-max-entries 0":               func(o *decisionlog.Options) { o.Datastore, o.KeyFile, o.CallerMaxEntries = "x.db", "k", 0 },
		"--decision-log-queue 0":                            func(o *decisionlog.Options) { o.Datastore, o.KeyFile, o.Queue = "x.db", "k", 0 },
		"want 0 (no bound) or more":                         func(o *decisionlog.Options) { o.Datastore, o.KeyFile, o.MaxAge = "x.db", "k", -time.Second },
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
	dir := t.TempDir()
	skey, _, err := note.GenerateKey(rand.Reader, "svc.test/decisions")
	if err != nil {
		t.Fatal(err)
	}
	o := decisionlog.NewOptions()
	o.Datastore, o.KeyFile = filepath.Join(dir, "log.db"), filepath.Join(dir, "log.key")
	if err := os.WriteFile(o.KeyFile, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := decisionlog.Open(ctx, "svc", o, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	run, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = l.Start(run); close(done) }()
	defer func() { cancel(); <-done }()

	small := []byte(`{"record":{"effect":"allow","note":"a \"quoted\" word"}}` + "\n")
	large := []byte(`{"evaluations":[` + strings.Repeat(`{"decision":true},`, 4000) + `{"decision":true}]}`)
	for _, answer := range [][]byte{small, large} {
		if refusal, err := l.Keep(ctx, decisionlog.Decision{Caller: "c", Allowed: true, Path: "/v1/check", Status: 200, Answer: answer, At: time.Now()}); !refusal.IsZero() {
			t.Fatalf("Keep: %v %v", refusal, err)
		}
	}
	for i, answer := range [][]byte{small, large} {
		s, err := l.Translog().Get(ctx, int64(i))
		if err != nil {
			t.Fatal(err)
		}
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
