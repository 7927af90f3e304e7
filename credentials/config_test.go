package credentials_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

func env(m map[string]string) credentials.LoadOption {
	return credentials.WithLookupEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
}

func writeYAML(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFileAndEnvironment(t *testing.T) {
	p := writeYAML(t, `
controller:
  address: controller.vmafx.svc:9443
  tls: true
  ca_file: /etc/ca.pem
  server_name: controller.vmafx.svc
  token_file: /var/run/token
other:
  ignored: true
`)
	t.Run("file only", func(t *testing.T) {
		cfg, err := credentials.Load("controller", credentials.FromFile(p), credentials.FromEnv("VMAFX_CONTROLLER_"), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Address != "controller.vmafx.svc:9443" || !cfg.TLS || cfg.CAFile != "/etc/ca.pem" ||
			cfg.ServerName != "controller.vmafx.svc" || cfg.TokenFile != "/var/run/token" || cfg.Token != "" {
			t.Fatalf("cfg = %+v", cfg)
		}
	})
	t.Run("environment wins", func(t *testing.T) {
		cfg, err := credentials.Load("controller", credentials.FromEnv("VMAFX_CONTROLLER_"), credentials.FromFile(p), env(map[string]string{
			"VMAFX_CONTROLLER_TLS":         "false",
			"VMAFX_CONTROLLER_CA_FILE":     "/env/ca.pem",
			"VMAFX_CONTROLLER_SERVER_NAME": "env.example",
			"VMAFX_CONTROLLER_TOKEN_FILE":  "/env/token",
			"VMAFX_CONTROLLER_TOKEN":       "inline",
			"VMAFX_CONTROLLER_ADDRESS":     "unix:///run/vmafx.sock",
		}))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.TLS || cfg.CAFile != "/env/ca.pem" || cfg.ServerName != "env.example" ||
			cfg.TokenFile != "/env/token" || cfg.Token != "inline" || cfg.Address != "unix:///run/vmafx.sock" {
			t.Fatalf("cfg = %+v", cfg)
		}
	})
	t.Run("empty variable is unset", func(t *testing.T) {
		cfg, err := credentials.Load("controller", credentials.FromFile(p), credentials.FromEnv("VMAFX_CONTROLLER_"), env(map[string]string{"VMAFX_CONTROLLER_TOKEN_FILE": ""}))
		if err != nil || cfg.TokenFile != "/var/run/token" {
			t.Fatalf("cfg = %+v, %v", cfg, err)
		}
	})
	t.Run("nested section", func(t *testing.T) {
		p := writeYAML(t, "vmafx:\n  controller:\n    tls: true\n")
		cfg, err := credentials.Load("vmafx.controller", credentials.FromFile(p))
		if err != nil || !cfg.TLS {
			t.Fatalf("cfg = %+v, %v", cfg, err)
		}
	})
	t.Run("absent section and environment only", func(t *testing.T) {
		cfg, err := credentials.Load("controller", credentials.FromTree(map[string]any{}), credentials.FromEnv("X_"), env(map[string]string{"X_TLS": "1"}))
		if err != nil || !cfg.TLS {
			t.Fatalf("cfg = %+v, %v", cfg, err)
		}
	})
}

func TestLoadRefusesMalformedValues(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		wants []string
	}{
		{"tls: maybe", "controller:\n  tls: maybe\n", nil, []string{"controller.tls", `string "maybe"`, "boolean"}},
		{"quoted boolean", "controller:\n  tls: \"true\"\n", nil, []string{"controller.tls", `string "true"`}},
		{"tls as a number", "controller:\n  tls: 1\n", nil, []string{"controller.tls", "number 1"}},
		{"ca_file as a list", "controller:\n  ca_file: [a, b]\n", nil, []string{"controller.ca_file", "a list"}},
		{"token_file as a number", "controller:\n  token_file: 42\n", nil, []string{"controller.token_file", "want a string"}},
		{"unknown key", "controller:\n  token_flie: /x\n", nil, []string{"controller.token_flie", "unknown key"}},
		{"section not a mapping", "controller: yes\n", nil, []string{"controller", "want a mapping"}},
		{"env tls maybe", "", map[string]string{"VMAFX_CONTROLLER_TLS": "maybe"}, []string{"VMAFX_CONTROLLER_TLS", `"maybe"`}},
		{"not YAML", "controller: [\n", nil, []string{"parsing", "config.yaml"}},
		// YAML keeps the last of two: the second would switch TLS off unseen.
		{"a key written twice", "controller:\n  tls: true\n  tls: false\n", nil, []string{"parsing", `key "tls" already set`}},
		{"a section written twice", "controller:\n  tls: true\ncontroller:\n  address: x\n", nil, []string{"parsing", `key "controller" already set`}},
		{"a key written twice, JSON", `{"controller": {"tls": true, "tls": false}}`, nil, []string{"parsing", `key "tls" already set`}},
		{"the document a list", "- controller\n", nil, []string{"parsing", "not a mapping"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeYAML(t, tt.yaml)
			_, err := credentials.Load("controller", credentials.FromFile(p), credentials.FromEnv("VMAFX_CONTROLLER_"), env(tt.env))
			if err == nil {
				t.Fatal("Load accepted it")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	t.Run("missing file names it", func(t *testing.T) {
		_, err := credentials.Load("controller", credentials.FromFile("/nonexistent/config.yaml"))
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/config.yaml") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a secret value is not echoed", func(t *testing.T) {
		p := writeYAML(t, "controller:\n  tls: eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJzZWNyZXQifQ.c2lnbmF0dXJl\n")
		_, err := credentials.Load("controller", credentials.FromFile(p))
		if err == nil || strings.Contains(err.Error(), "eyJ") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	noCert := filepath.Join(dir, "nocert.pem")
	_, keyPEM, _ := ca.Issue("x", "localhost")
	if err := os.WriteFile(noCert, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		vars  map[string]string
		wants []string // empty: valid
	}{
		{"zero value", nil, nil},
		{"TLS with token file", map[string]string{"TLS": "true", "TOKEN_FILE": "/t", "CA_FILE": caFile, "SERVER_NAME": "s"}, nil},
		{"TLS with system roots", map[string]string{"TLS": "true", "TOKEN": "t"}, nil},
		{"token on a unix socket without TLS", map[string]string{"ADDRESS": "unix:///run/c.sock", "TOKEN_FILE": "/t"}, nil},
		{"token on an abstract socket without TLS", map[string]string{"ADDRESS": "unix-abstract:c", "TOKEN": "t"}, nil},
		{"plaintext TCP without a token", map[string]string{"ADDRESS": "127.0.0.1:9000"}, nil},
		{"token and token file", map[string]string{"TLS": "true", "TOKEN": "t", "TOKEN_FILE": "/t"},
			[]string{"controller.token (C_TOKEN) and controller.token_file (C_TOKEN_FILE) are both set"}},
		{"CA file without TLS", map[string]string{"CA_FILE": caFile},
			[]string{"controller.ca_file (C_CA_FILE) is set but controller.tls (C_TLS) is false"}},
		{"server name without TLS", map[string]string{"SERVER_NAME": "x"},
			[]string{"controller.server_name (C_SERVER_NAME) is set but controller.tls (C_TLS) is false"}},
		{"token file over plaintext TCP", map[string]string{"ADDRESS": "127.0.0.1:9000", "TOKEN_FILE": "/t"},
			[]string{"controller.token_file (C_TOKEN_FILE) sends a bearer token", "controller.tls (C_TLS): true", `"127.0.0.1:9000"`}},
		{"inline token with no address and no TLS", map[string]string{"TOKEN": "t"},
			[]string{"controller.token (C_TOKEN) sends a bearer token", "controller.address (C_ADDRESS) is not set"}},
		{"CA file missing", map[string]string{"TLS": "true", "CA_FILE": filepath.Join(dir, "missing.pem")},
			[]string{"controller.ca_file (C_CA_FILE)", "missing.pem", "no such file"}},
		{"CA file holds a key, not a certificate", map[string]string{"TLS": "true", "CA_FILE": noCert},
			[]string{"controller.ca_file (C_CA_FILE)", "nocert.pem", "holds no PEM certificate"}},
		{"CA file is not PEM", map[string]string{"TLS": "true", "CA_FILE": garbage},
			[]string{"garbage.pem", "holds no PEM certificate"}},
		{"every problem at once", map[string]string{"TOKEN": "t", "TOKEN_FILE": "/t", "CA_FILE": caFile, "SERVER_NAME": "x"},
			[]string{"both set", "controller.ca_file", "controller.server_name", "sends a bearer token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range tt.vars {
				vars["C_"+k] = v
			}
			cfg, err := credentials.Load("controller", credentials.FromEnv("C_"), env(vars))
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if len(tt.wants) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() accepted it")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q; want it to contain %q", err, w)
				}
			}
			// DialOptions and Transport refuse the same configuration.
			if _, derr := cfg.DialOptions(); derr == nil {
				t.Error("DialOptions accepted a configuration Validate refuses")
			}
			if _, terr := cfg.Transport(); terr == nil {
				t.Error("Transport accepted a configuration Validate refuses")
			}
		})
	}
}

func TestValidateHandBuiltConfigNamesPlainKeys(t *testing.T) {
	err := credentials.Config{Token: "t", TokenFile: "/t", TLS: true}.Validate()
	if err == nil || !strings.Contains(err.Error(), "token and token_file are both set") {
		t.Fatalf("err = %v", err)
	}
}
