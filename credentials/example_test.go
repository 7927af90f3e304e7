package credentials_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/callerauth/callerauth/credentials"
)

func ExampleConfig_Validate() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "operator.yaml")
	_ = os.WriteFile(path, []byte("controller:\n  address: controller.vmafx.svc:9090\n  token_file: /var/run/token\n"), 0o600)

	cfg, err := credentials.Load("controller", credentials.FromFile(path), credentials.FromEnv("VMAFX_CONTROLLER_"),
		credentials.WithLookupEnv(func(string) (string, bool) { return "", false }))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Validate())
	// Output: credentials: controller.token_file (VMAFX_CONTROLLER_TOKEN_FILE) sends a bearer token, which needs controller.tls (VMAFX_CONTROLLER_TLS): true; only a Unix socket controller.address (VMAFX_CONTROLLER_ADDRESS) may carry it without TLS, and controller.address (VMAFX_CONTROLLER_ADDRESS) is "controller.vmafx.svc:9090"
}
