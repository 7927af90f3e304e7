package loopback

import (
	"crypto/tls"
	"crypto/x509"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/token"
)

// DialTLS is a client of a TLS gRPC server on loopback whose certificate
// roots signs, sending tok as the bearer token of every call as it is —
// never checked for expiry, so that a test can send an expired or forged
// token on purpose. A service's own client dials through
// credentials.Config.Dial instead.
func DialTLS(addr string, roots *x509.CertPool, tok string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(credentials.PerRPC(token.Static(tok))))
}
