package credentials

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"

	"github.com/callerauth/callerauth/token"
)

// Dial validates the configuration and connects (lazily, as
// grpc.NewClient does) to its address with [Config.DialOptions].
func (c Config) Dial(extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts, err := c.DialOptions()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(c.Address, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("credentials: %s %q: %w", c.name(keyAddress), c.Address, err)
	}
	return conn, nil
}

// DialOptions validates the configuration and returns the gRPC dial options
// that carry it: transport credentials (TLS with the configured CA pool and
// server name; local credentials for a Unix socket without TLS; plaintext
// otherwise) and, when a token is configured, per-RPC bearer credentials
// that read the token source on every RPC, refuse an expired JWT before the
// RPC is sent, require transport security at dial time and check the
// connection's security level on every call.
func (c Config) DialOptions() ([]grpc.DialOption, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var tc grpccreds.TransportCredentials
	switch {
	case c.TLS:
		cfg, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		tc = grpccreds.NewTLS(cfg)
	case IsUnixAddress(c.Address):
		// Reports PrivacyAndIntegrity on a Unix socket, NoSecurity on TCP.
		tc = local.NewCredentials()
	default:
		tc = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(tc), grpc.WithChainUnaryInterceptor(traceUnary), grpc.WithChainStreamInterceptor(traceStream)}
	if src := c.TokenSource(); src != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(PerRPC(src)))
	}
	return opts, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := c.certPool()
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// PerRPC returns gRPC per-RPC credentials that send src's token as
// "authorization: Bearer <token>" on every RPC. They require transport
// security: grpc refuses to dial a plaintext connection with them, and each
// call checks that the connection provides privacy and integrity (TLS, or
// local credentials on a Unix socket) before reading the token.
func PerRPC(src token.Source) grpccreds.PerRPCCredentials { return bearerRPC{src: src} }

type bearerRPC struct{ src token.Source }

func (b bearerRPC) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, _ := grpccreds.RequestInfoFromContext(ctx)
	if err := grpccreds.CheckSecurityLevel(ri.AuthInfo, grpccreds.PrivacyAndIntegrity); err != nil {
		return nil, fmt.Errorf("credentials: refusing to send a bearer token over this connection: %w", err)
	}
	tok, err := b.src.Token(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (bearerRPC) RequireTransportSecurity() bool { return true }
