package connector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/connector"
)

// proc is a running connector binary.
type proc struct {
	cmd       *exec.Cmd
	dir       string
	socket    string
	addr      string // deployment role
	datastore string
	metrics   string
	stderr    *syncBuffer
	done      chan struct{} // closed when the process exits
	exitErr   error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startProc runs the binary with config.json and extra flags, and waits
// until /readyz answers. It fails the test, with the process's log, if the
// connector exits first.
func startProc(t *testing.T, config string, env []string, args ...string) *proc {
	t.Helper()
	p, err := launch(t, config, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + p.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("connector exited: %v\n%s", p.exitErr, p.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("connector not ready:\n%s", p.stderr.String())
		}
	}
}

func launch(t *testing.T, config string, env []string, args ...string) (*proc, error) {
	t.Helper()
	dir := t.TempDir()
	p := &proc{dir: dir, socket: filepath.Join(dir, "pc.sock"), datastore: filepath.Join(dir, "events.db"), metrics: freeAddr(t), stderr: &syncBuffer{}, done: make(chan struct{})}
	cfgFile := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	full := append([]string{"--config", cfgFile, "--datastore", p.datastore, "--metrics-listen", p.metrics, "--log-level", "debug"}, args...)
	if !strings.Contains(strings.Join(args, " "), "--role deployment") {
		full = append(full, "--socket", p.socket)
	}
	p.cmd = exec.Command(binary, full...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.exitErr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("connector log:\n%s", p.stderr.String())
		}
	})
	return p, nil
}

// exitOf runs the binary expecting it to refuse to start, and returns its
// output.
func exitOf(t *testing.T, config string, env []string, args ...string) string {
	t.Helper()
	p, err := launch(t, config, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.exitErr == nil {
			t.Fatalf("connector exited 0; want a refusal\n%s", p.stderr.String())
		}
		return p.stderr.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("connector started; want a refusal\n%s", p.stderr.String())
	}
	return ""
}

// publisher connects to the socket with a token file ("" for none).
func (p *proc) publisher(t *testing.T, tokenFile string) *connector.Publisher {
	t.Helper()
	pub, err := connector.NewPublisher(credentials.Config{Address: "unix://" + p.socket, TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func event(node string) *pcv1.HealthEvent {
	return &pcv1.HealthEvent{Version: 1, Agent: "e2e", CheckName: "GpuXid", Message: "xid 79", NodeName: node, IsFatal: true}
}

func events(nodes ...string) []*pcv1.HealthEvent {
	out := make([]*pcv1.HealthEvent, len(nodes))
	for i, n := range nodes {
		out[i] = event(n)
	}
	return out
}

// stored lists what the connector stored, as node names and callers.
func (p *proc) stored(t *testing.T) []connector.StoredEvent {
	t.Helper()
	s, err := connector.OpenStore(p.datastore)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.List(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// metrics scrapes the auth counters as "name{label}" → value.
func (p *proc) metricsNow(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "platform_connector_auth_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[name+"{"+m.GetLabel()[0].GetValue()+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

func deltas(before, after map[string]float64) string {
	var parts []string
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			parts = append(parts, fmt.Sprintf("%s+%g", strings.TrimPrefix(k, "platform_connector_auth_"), d))
		}
	}
	sortStrings(parts)
	return strings.Join(parts, " ")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func writeToken(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// configJSON is an enabled node-binding config.json.
func configJSON(cross []string, mode string, failOpen bool) string {
	m := map[string]any{"enableNodeBindingAuth": true, "AuthAudience": aud, "AuthCrossNodeServiceAccounts": cross}
	if cross == nil {
		m["AuthCrossNodeServiceAccounts"] = []string{}
	}
	if mode != "" {
		m["AuthMode"] = mode
	}
	m["AuthFailOpenOnUnavailable"] = failOpen
	b, _ := json.Marshal(m)
	return string(b)
}
