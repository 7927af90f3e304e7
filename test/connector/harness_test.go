package connector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/scrape"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// proc is a running connector binary.
type proc struct {
	*e2e.Process
	dir       string
	socket    string
	addr      string // deployment role
	datastore string
	metrics   string
}

// startProc runs the binary with config.json and extra flags, and waits
// until /readyz answers. It fails the test, with the process's log, if the
// connector exits first.
func startProc(t *testing.T, config string, env []string, args ...string) *proc {
	t.Helper()
	p := launch(t, config, env, args...)
	p.metrics = p.LogValue(t, "connector: serving", "metrics", 60*time.Second)
	p.addr = p.LogValue(t, "connector: serving", "address", time.Second)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + p.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("connector not ready")
		}
	}
}

func launch(t *testing.T, config string, env []string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{dir: dir, socket: filepath.Join(dir, "pc.sock"), datastore: filepath.Join(dir, "events.db")}
	cfgFile := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	full := append([]string{"--config", cfgFile, "--datastore", p.datastore, "--metrics-listen", "127.0.0.1:0", "--log-level", "debug"}, args...)
	if !strings.Contains(strings.Join(args, " "), "--role deployment") {
		full = append(full, "--socket", p.socket)
	}
	p.Process = e2e.Start(t, binary, full, env...)
	return p
}

// exitOf runs the binary expecting it to refuse to start, and returns its
// output.
func exitOf(t *testing.T, config string, env []string, args ...string) string {
	t.Helper()
	p := launch(t, config, env, args...)
	code, exited := p.Exited(20 * time.Second)
	switch {
	case !exited:
		t.Fatalf("connector started; want a refusal\n%s", p.Output())
	case code == 0:
		t.Fatalf("connector exited 0; want a refusal\n%s", p.Output())
	}
	return p.Output()
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

// families scrapes the connector's /metrics.
func (p *proc) families(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := scrape.Families(p.metrics)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// metricsNow scrapes the auth counters as "name{label}" → value.
func (p *proc) metricsNow(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, mf := range p.families(t) {
		if !strings.HasPrefix(name, "platform_connector_auth_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[name+"{"+m.GetLabel()[0].GetValue()+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// totals scrapes every counter and gauge family as name → its sum.
func (p *proc) totals(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, mf := range p.families(t) {
		for _, m := range mf.GetMetric() {
			out[name] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
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
