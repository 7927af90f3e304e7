package reliability_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/kit/e2e"
)

// TestStopUnderLoad: the real pdp, its decision log required, told to
// stop (SIGTERM) under eight clients' load. Its stop order holds: the
// listener stops taking requests and drains the ones in flight while the
// log still runs — so no request gets a 5xx, and every allowed answer a
// client received is in the log — then the log writes what is queued and
// signs a last checkpoint that covers every entry, then the process exits
// 0.
func TestStopUnderLoad(t *testing.T) {
	v := startValidator(t)
	dir := t.TempDir()
	skey, _, err := note.GenerateKey(rand.Reader, "pdp.test/stop")
	if err != nil {
		t.Fatal(err)
	}
	keyFile, logDir := filepath.Join(dir, "log.key"), filepath.Join(dir, "decisions")
	if err := os.WriteFile(keyFile, []byte(skey), 0o600); err != nil {
		t.Fatal(err)
	}
	signing := filepath.Join(dir, "signing.pem")
	genKey(t, dir, "signing.pem")
	p := e2e.Start(t, pdpBin, []string{"--listen", "127.0.0.1:0", "--insecure-http", "--metrics-listen", "127.0.0.1:0",
		"--policy-dir", filepath.Join(example, "policy"), "--registry", filepath.Join(example, "registry.json"),
		"--kubeconfig", v.iss.KubeconfigFile(), "--caller-binding", "secrets-engine=system:serviceaccount:secrets-engine:secrets-engine",
		"--signing-key-file", signing, "--decision-log", logDir, "--decision-log-key-file", keyFile, "--decision-log-mode", "required"})
	addr := p.LogValue(t, "pdp: serving", "address", 60*time.Second)
	tok, err := v.iss.Mint(devissuer.TokenRequest{Namespace: "secrets-engine", ServiceAccount: "secrets-engine", Audiences: []string{"flex-auth"}, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	body := readFile(t, filepath.Join(example, "check_request_allow_rotate.json"))
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/check", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok.Token)
				resp, err := client.Do(req)
				if err != nil {
					// Refused once the listener closed: the clients stop.
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := codes[http.StatusOK]
		mu.Unlock()
		if n >= 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load got %v in 60 s", codes)
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if code, ok := p.Exited(60 * time.Second); !ok || code != 0 {
		t.Fatalf("the pdp after SIGTERM: exited %v, code %d\n%s", ok, code, p.Output())
	}
	if len(codes) != 1 {
		t.Errorf("answers under the stop: %v, want 200s alone", codes)
	}
	l, err := translog.Open(translog.Config{Dir: logDir, Key: skey, Metrics: "stop_test"})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := l.Latest()
	size := l.Size()
	t.Logf("%d allowed answers; the log holds %d entries, its last checkpoint %d", codes[http.StatusOK], size, c.Size)
	if !ok || c.Size != size {
		t.Errorf("the last checkpoint covers %d of the %d entries", c.Size, size)
	}
	if size < int64(codes[http.StatusOK]) {
		t.Errorf("the log holds %d entries for %d allowed answers", size, codes[http.StatusOK])
	}
}
