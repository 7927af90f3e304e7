// Package credentials is the one client implementation of bearer
// authentication to a control-plane service: TLS, a bearer token re-read
// from a file on every call, and an expired JWT refused before it leaves the
// process.
//
// A [Config] is read with [Load] from a section of a YAML configuration file
// and from environment variables with a prefix, the environment winning. For
// the vmafx controller client, section "controller" and prefix
// "VMAFX_CONTROLLER_" give:
//
//	controller.address      VMAFX_CONTROLLER_ADDRESS
//	controller.tls          VMAFX_CONTROLLER_TLS
//	controller.ca_file      VMAFX_CONTROLLER_CA_FILE
//	controller.server_name  VMAFX_CONTROLLER_SERVER_NAME
//	controller.token_file   VMAFX_CONTROLLER_TOKEN_FILE
//	controller.token        VMAFX_CONTROLLER_TOKEN
//
// [Config.Validate] refuses every combination that cannot be honoured, naming
// the keys; call it once at start-up and stop on error. [Config.DialOptions]
// and [Config.Transport] validate again and return the gRPC dial options and
// the HTTP round tripper. Both read the token source on every call, apply
// the expiry check of [token.CheckExpiry], and refuse to send a token over a
// connection without transport security (a Unix socket counts as secure;
// plaintext TCP does not).
//
//	cfg, err := credentials.Load("controller",
//		credentials.FromFile("/etc/vmafx/operator.yaml"),
//		credentials.FromEnv("VMAFX_CONTROLLER_"))
//	if err != nil {
//		return err
//	}
//	opts, err := cfg.DialOptions()
//	if err != nil {
//		return err // names the keys that cannot be honoured
//	}
//	conn, err := grpc.NewClient(cfg.Address, opts...)
//
// The name is the same as grpc-go's google.golang.org/grpc/credentials, so a
// file that needs both imports one of them under another name (this module
// writes grpccreds for grpc's). It is kept on purpose: it is what the
// package is — a caller's credentials, for gRPC and HTTP alike — and what a
// user of it looks for; a caller of DialOptions does not need grpc's
// credentials package at all, so the clash only reaches code that builds
// its own transport credentials, and a rename would trade one import alias
// there for a worse name everywhere.
package credentials
