// Package connection is the controller connection the vmafx node and the
// operator share: one loader, one set of names (the "controller" section of
// a YAML file and the VMAFX_CONTROLLER_* environment, the environment
// winning), one dial.
package connection

import (
	"errors"
	"os"

	"google.golang.org/grpc"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/credentials"
)

// Load reads and validates the connection from configFile ("" for the
// environment alone) and lookupEnv (default os.LookupEnv). A combination
// that cannot be honoured is an error naming the key and the variable.
func Load(configFile string, lookupEnv func(string) (string, bool)) (credentials.Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	loads := []credentials.LoadOption{credentials.FromEnv("VMAFX_CONTROLLER_"), credentials.WithLookupEnv(lookupEnv)}
	if configFile != "" {
		loads = append(loads, credentials.FromFile(configFile))
	}
	cfg, err := credentials.Load("controller", loads...)
	if err != nil {
		return cfg, err
	}
	if cfg.Address == "" {
		return cfg, errors.New("controller.address (VMAFX_CONTROLLER_ADDRESS) is required")
	}
	return cfg, cfg.Validate()
}

// Dial connects (lazily) to the controller's JobService with cfg: TLS, the
// token read on every call, an expired JWT never sent.
func Dial(cfg credentials.Config) (*grpc.ClientConn, vmafxv1.JobServiceClient, error) {
	conn, err := cfg.Dial()
	if err != nil {
		return nil, nil, err
	}
	return conn, vmafxv1.NewJobServiceClient(conn), nil
}
