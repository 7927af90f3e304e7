package cluster

import (
	"crypto/tls"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/callerauth/callerauth/devissuer"
)

// ServeIssuer opens a dev issuer in dir — a tenant's identity provider —
// named for, and served over HTTPS on, a port of its own on the node's
// address, where pods reach it (the machine does not). Its certificate is
// for the node's address, signed by the issuer's CA (iss.CAFile()). dir
// must be new or an issuer's of the same URL, so in practice new: the port
// is picked now. close stops serving.
func (c *Cluster) ServeIssuer(dir string) (iss *devissuer.Issuer, close func(), err error) {
	lis, err := c.Listen("tcp", net.JoinHostPort(c.Address, "0"))
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = lis.Close()
		}
	}()
	if iss, err = devissuer.Open(dir, devissuer.Config{Issuer: "https://" + lis.Addr().String()}); err != nil {
		return nil, nil, err
	}
	certFile, keyFile, err := iss.IssueServingCert(filepath.Join(dir, "serving"), c.Address)
	if err != nil {
		return nil, nil, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: iss.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	return iss, func() { _ = srv.Close() }, nil
}
