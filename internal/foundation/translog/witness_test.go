package translog

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/callerauth/callerauth/internal/kit/tlogtools"
)

// eventually waits up to 30 s for cond, then fails with what it says.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after 30 s, %s", what, got)
		}
	}
}

// TestWitnessed runs the log against two real witnesses
// (transparency-dev/witness's omniwitness): each checkpoint is cosigned
// by both; a witness that is down holds back no entry and no checkpoint,
// only the witnessed one, and catches up when it is back without the log
// growing; a log opened again (the witnesses knowing more than it asks
// them from) gets cosigned through the witnesses' 409 and a consistency
// proof; and the served checkpoint carries the cosignatures.
func TestWitnessed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	skey := testKey(t, "log.test/witnessed")
	_, _, vkey, err := Keys(skey)
	if err != nil {
		t.Fatal(err)
	}
	var ws []*tlogtools.Witness
	var policy strings.Builder
	for _, name := range []string{"a", "b"} {
		wdir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(wdir, 0o700); err != nil {
			t.Fatal(err)
		}
		w, err := tlogtools.StartWitness(ctx, wdir, vkey)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		ws = append(ws, w)
		fmt.Fprintf(&policy, "witness %s %s\n", w.Key, w.URL)
	}
	p, err := ParseWitnessPolicy([]byte(policy.String() + "quorum 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: filepath.Join(dir, "log"), Key: skey, Witnesses: p, WitnessTimeout: 5 * time.Second, SignEvery: time.Hour}
	l := start(t, cfg)
	witnessedAt := func(l *running, size int64) {
		t.Helper()
		eventually(t, fmt.Sprintf("the checkpoint of %d witnessed", size), func() (bool, string) {
			c, ok := l.Witnessed()
			return ok && c.Size == size, fmt.Sprintf("witnessed %d (%v)", c.Size, ok)
		})
		c, _ := l.Witnessed()
		if _, names, err := p.Cosigners(c.Note, l.Verifier()); err != nil || len(names) != 2 {
			t.Fatalf("the witnessed checkpoint of %d: cosigned by %v: %v\n%s", size, names, err, c.Note)
		}
	}
	l.add(t, 0, 300)
	if _, err := l.Sign(ctx); err != nil {
		t.Fatal(err)
	}
	witnessedAt(l, 300)
	// The checkpoint served, the latest, carries both cosignatures.
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	served := func(path string) string {
		resp, err := http.Get(srv.URL + "/" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	eventually(t, "the served checkpoint cosigned", func() (bool, string) {
		got := served("checkpoint")
		_, names, err := p.Cosigners([]byte(got), l.Verifier())
		return err == nil && len(names) == 2, got
	})
	if got, _ := l.Witnessed(); served("witnessed-checkpoint") != string(got.Note) {
		t.Errorf("witnessed-checkpoint serves %q, want %q", served("witnessed-checkpoint"), got.Note)
	}

	// b is down: entries and checkpoints go on; a cosigns them; the
	// witnessed checkpoint stays, and b's lag and failures say why.
	ws[1].Stop()
	l.add(t, 300, 310)
	if c, err := l.Sign(ctx); err != nil || c.Size != 310 {
		t.Fatalf("signing with a witness down: %d, %v", c.Size, err)
	}
	wa, wb := ws[0].Key[:strings.Index(ws[0].Key, "+")], ws[1].Key[:strings.Index(ws[1].Key, "+")]
	eventually(t, "a cosigns 310 while b is down", func() (bool, string) {
		c, _ := l.Latest()
		_, names, _ := p.Cosigners(c.Note, l.Verifier())
		return len(names) == 1 && names[0] == wa, fmt.Sprint(names)
	})
	eventually(t, "b's failures counted", func() (bool, string) {
		n := testutil.ToFloat64(l.witnesses.m.failures.WithLabelValues(wb, "unreachable"))
		return n >= 1, fmt.Sprint(n)
	})
	if c, _ := l.Witnessed(); c.Size != 300 {
		t.Errorf("with b down, the witnessed checkpoint is of %d, want 300", c.Size)
	}
	if lag := testutil.ToFloat64(l.witnesses.m.lag.WithLabelValues(wb)); lag != 10 {
		t.Errorf("b's lag: %v entries, want 10", lag)
	}
	// b is back, keeping what it cosigned: it catches up with no new
	// entry and no new checkpoint (the retry), from 300 to 310 with a
	// consistency proof.
	if err := ws[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	witnessedAt(l, 310)
	eventually(t, "b's lag once back", func() (bool, string) {
		lag := testutil.ToFloat64(l.witnesses.m.lag.WithLabelValues(wb))
		return lag == 0, fmt.Sprint(lag)
	})

	// Opened again: the log asks each witness from 0, is told 310 (409),
	// and goes on from there; the witnessed checkpoint is read back.
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	l2 := start(t, cfg)
	if c, ok := l2.Witnessed(); !ok || c.Size != 310 {
		t.Fatalf("reopened: witnessed %d (%v), want 310", c.Size, ok)
	}
	l2.add(t, 310, 700)
	if _, err := l2.Sign(ctx); err != nil {
		t.Fatal(err)
	}
	witnessedAt(l2, 700)
	for _, w := range []string{wa, wb} {
		if n := testutil.ToFloat64(l2.witnesses.m.failures.WithLabelValues(w, "conflict")); n != 0 {
			t.Errorf("witness %s: %v conflicts left unresolved", w, n)
		}
	}
}

// TestWitnessAnswers: what a witness answers is hostile until checked —
// a cosignature by another key, a signature that does not verify, an
// answer too large, an error status — and none of it reaches the
// checkpoint; each is counted by why.
func TestWitnessAnswers(t *testing.T) {
	ctx := context.Background()
	skey := testKey(t, "log.test/answers")
	wkey := testKey(t, "witness.test/w")
	_, _, wvkey, _ := Keys(wkey)
	wv, err := CosignatureVerifier(wvkey)
	if err != nil {
		t.Fatal(err)
	}
	// The witness's key ID, and a signature that does not verify.
	badSig := binary.BigEndian.AppendUint32(nil, wv.KeyHash())
	badSig = append(badSig, make([]byte, 8+64)...)
	answers := map[string]func(w http.ResponseWriter){
		"other-key": func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, "— witness.test/impostor "+strings.Repeat("A", 96)+"\n")
		},
		"bad-signature": func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, "— witness.test/w "+base64.StdEncoding.EncodeToString(badSig)+"\n")
		},
		"too-large": func(w http.ResponseWriter) { _, _ = io.WriteString(w, strings.Repeat("x", maxWitnessAnswer+1)) },
		"status":    func(w http.ResponseWriter) { http.Error(w, "no", http.StatusForbidden) },
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				answer(w)
			}))
			defer srv.Close()
			p, err := ParseWitnessPolicy([]byte("witness " + wvkey + " " + srv.URL + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			l := start(t, Config{Dir: t.TempDir(), Key: skey, Witnesses: p, SignEvery: time.Hour})
			l.add(t, 0, 5)
			if _, err := l.Sign(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the answer counted", func() (bool, string) {
				var n float64
				for _, why := range []string{"bad_cosignature", "unreachable", "403"} {
					n += testutil.ToFloat64(l.witnesses.m.failures.WithLabelValues("witness.test/w", why))
				}
				return n >= 1, fmt.Sprint(n)
			})
			if _, ok := l.Witnessed(); ok {
				t.Error("witnessed on a hostile answer")
			}
			c, _ := l.Latest()
			if strings.Contains(string(c.Note), "witness.test") {
				t.Errorf("the checkpoint took the answer:\n%s", c.Note)
			}
		})
	}
}

// TestWitnessPolicy: the policy file's errors name the line.
func TestWitnessPolicy(t *testing.T) {
	wkey := testKey(t, "witness.test/w")
	_, _, vkey, _ := Keys(wkey)
	for _, c := range []struct{ in, want string }{
		{"", "no witness"},
		{"witness " + vkey + " ftp://x\n", "line 1: witness URL"},
		{"witness " + vkey + " http://example.com\n", "http only to loopback"},
		{"witness nope\n", "line 1: witness key"},
		{"witness " + vkey + "\nwitness " + vkey + "\n", "line 2: witness \"witness.test/w\" twice"},
		{"witness " + vkey + "\nquorum 2\n", "quorum 2 of 1"},
		{"witness " + vkey + "\nquorum 0\n", "line 2: quorum"},
		{"witnes " + vkey + "\n", "line 1: want"},
	} {
		_, err := ParseWitnessPolicy([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
	p, err := ParseWitnessPolicy([]byte("# ours\n\nwitness " + vkey + " https://w.example/prefix/\n"))
	if err != nil || p.Quorum != 1 || p.Witnesses[0].URL != "https://w.example/prefix" {
		t.Errorf("%+v, %v", p, err)
	}
}
