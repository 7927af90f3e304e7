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
			_, err := node.New(node.Options{Config: tt.config, LookupEnv: func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v; want %q", err, tt.want)
			}
		})
	}
	n, err := node.New(node.Options{Config: cfg, LookupEnv: func(k string) (string, bool) {
		return map[string]string{"VMAFX_CONTROLLER_TLS": "true"}[k], k == "VMAFX_CONTROLLER_TLS"
	}})
	if err != nil {
		t.Fatalf("TLS and a token file: %v", err)
	}
	_ = n.Close()
}
