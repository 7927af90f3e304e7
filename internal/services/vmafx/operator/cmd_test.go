package operator_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/vmafx/operator"
)

// TestLoadRefusals: the operator reads the node's keys with the node's
// package, and a combination that cannot be honoured stops it at start-up
// naming the key and the variable.
func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "operator.yaml")
	_ = os.WriteFile(cfg, []byte("controller:\n  address: vmafx-controller.vmafx.svc:8443\n  token_file: /var/run/vmafx/token\n"), 0o600)
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	kubeconfig := writeFile(t, dir, "kubeconfig", "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: c\ncurrent-context: c\n")
	options := func(config string, env func(string) (string, bool)) operator.Options {
		o := operator.NewOptions()
		o.Config, o.LookupEnv, o.Kubeconfig = config, env, kubeconfig
		return o
	}
	for _, tt := range []struct {
		name string
		o    operator.Options
		want string
	}{
		{"a token over plaintext TCP", options(cfg, env(nil)), "controller.token_file (VMAFX_CONTROLLER_TOKEN_FILE) sends a bearer token, which needs controller.tls (VMAFX_CONTROLLER_TLS): true"},
		{"an unknown key", options(writeFile(t, dir, "bad.yaml", "controller:\n  server: x:1\n"), env(nil)), "controller.server in " + dir + "/bad.yaml: unknown key"},
		{"no address", options("", env(map[string]string{"VMAFX_CONTROLLER_TLS": "true"})), "controller.address (VMAFX_CONTROLLER_ADDRESS) is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.o.Complete(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Complete = %v; want %q", err, tt.want)
			}
		})
	}
	c, err := options(cfg, env(map[string]string{"VMAFX_CONTROLLER_TLS": "true"})).Complete()
	if err != nil || c.Controller.TokenFile != "/var/run/vmafx/token" || !c.Controller.TLS || c.REST.Host != "https://127.0.0.1:6443" {
		t.Fatalf("the environment completing the file: %+v %v", c, err)
	}
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFormerFlagNames: controller-runtime's flag names still parse —
// --metrics-bind-address is --metrics-listen ("0": off) — and
// --health-probe-bind-address must name the same listener, since the
// probes are served there now.
func TestFormerFlagNames(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // error; "" for none
	}{
		{[]string{"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, ""},
		{[]string{"--metrics-listen", "127.0.0.1:8080", "--health-probe-bind-address", ":8081"}, "--health-probe-bind-address :8081: /healthz and /readyz are served on --metrics-listen 127.0.0.1:8080"},
		{[]string{"--poll", "0s"}, "--poll 0s"},
	} {
		cmd := operator.NewCommand(io.Discard)
		cmd.SetArgs(append(c.args, "--config", filepath.Join(t.TempDir(), "missing.yaml")))
		cmd.SetOut(io.Discard)
		err := cmd.Execute()
		switch {
		case c.want == "" && err != nil && !strings.Contains(err.Error(), "missing.yaml"):
			t.Errorf("%v: %v; want the flags accepted (and the missing config refused)", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v; want %q", c.args, err, c.want)
		}
	}
	cmd := operator.NewCommand(io.Discard)
	if err := cmd.ParseFlags([]string{"--metrics-bind-address", "0"}); err != nil {
		t.Fatal(err)
	}
	if v := cmd.Flags().Lookup("metrics-listen").Value.String(); v != "" {
		t.Fatalf("--metrics-bind-address 0 left --metrics-listen %q; want off", v)
	}
}
