package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/vmafx/node"
)

// TestStartUpRefusals: a controller connection that cannot be honoured
// stops the node at start-up, naming the key and the variable — the same
// names and checks as the operator's, from the one credentials package.
func TestStartUpRefusals(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	_ = os.WriteFile(tok, []byte("x"), 0o600)
	cfg := filepath.Join(dir, "node.yaml")
	_ = os.WriteFile(cfg, []byte("controller:\n  address: 127.0.0.1:8443\n  token_file: "+tok+"\n"), 0o600)
	for _, tt := range []struct {
		name   string
		config string
		env    map[string]string
		want   string
	}{
		{"a token over plaintext TCP", cfg, nil, "controller.token_file (VMAFX_CONTROLLER_TOKEN_FILE) sends a bearer token, which needs controller.tls (VMAFX_CONTROLLER_TLS): true"},
		{"the environment wins, and is checked too", cfg, map[string]string{"VMAFX_CONTROLLER_TLS": "maybe"}, "VMAFX_CONTROLLER_TLS"},
		{"no address", "", map[string]string{"VMAFX_CONTROLLER_TLS": "true"}, "controller.address (VMAFX_CONTROLLER_ADDRESS) is required"},
		{"a token and a token file", cfg, map[string]string{"VMAFX_CONTROLLER_TLS": "true", "VMAFX_CONTROLLER_TOKEN": "y"}, "VMAFX_CONTROLLER_TOKEN"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := node.NewOptions("")
			o.Config, o.LookupEnv = tt.config, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			if _, err := o.Complete(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Complete = %v; want %q", err, tt.want)
			}
		})
	}
	o := node.NewOptions("")
	o.Config, o.LookupEnv = cfg, func(k string) (string, bool) {
		return map[string]string{"VMAFX_CONTROLLER_TLS": "true"}[k], k == "VMAFX_CONTROLLER_TLS"
	}
	c, err := o.Complete()
	if err != nil {
		t.Fatalf("TLS and a token file: %v", err)
	}
	n, err := node.New(c)
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
	// Zero is refused where it means nothing (there is no default to fall
	// back on once NewOptions gave one).
	for _, edit := range []func(*node.Options){
		func(o *node.Options) { o.Poll = 0 },
		func(o *node.Options) { o.MaxFrames = 0 },
		func(o *node.Options) { o.MaxJobDuration = -1 },
	} {
		o := node.NewOptions("")
		o.Config, o.LookupEnv = cfg, func(k string) (string, bool) { return "true", k == "VMAFX_CONTROLLER_TLS" }
		edit(&o)
		if _, err := o.Complete(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}
