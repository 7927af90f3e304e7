package serve

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/watched"
)

// defaultCertCheckInterval is how often the serving key pair's files are
// looked at for a change.
const defaultCertCheckInterval = 10 * time.Second

// CertReloader serves a key pair from files and picks up a new one when the
// files change — cert-manager renews, kubelet swaps the Secret's ..data
// symlink — without a restart: a watched value (internal/foundation/watched),
// looked at by a handshake at most once per interval. A pair that fails to
// load (the certificate written, the key not yet) keeps the previous one
// serving and is said once.
type certReloader struct {
	certFile string
	v        *watched.Value[*tls.Certificate]
}

// NewCertReloader loads the key pair; a pair that cannot be loaded now is
// an error (the service must not start without one). interval <= 0 means
// DefaultCertCheckInterval.
func newCertReloader(certFile, keyFile string, interval time.Duration, log *slog.Logger) (*certReloader, error) {
	if interval <= 0 {
		interval = defaultCertCheckInterval
	}
	v, err := watched.New(watched.Config[*tls.Certificate]{
		What:     "serve: the serving certificate",
		Paths:    []string{certFile, keyFile},
		Load:     func() (*tls.Certificate, error) { return load(certFile, keyFile) },
		Interval: interval,
		Logger:   log,
		Describe: func(c *tls.Certificate) []any {
			return []any{"serial", c.Leaf.SerialNumber.String(), "not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339)}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("serve: --tls-cert-file/--tls-key-file: %w", err)
	}
	return &certReloader{certFile: certFile, v: v}, nil
}

func load(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &cert, nil
}

// Certificate returns the pair being served, reloading it first when its
// files changed and the interval has passed.
func (r *certReloader) Certificate() *tls.Certificate {
	r.v.MaybeLook()
	return r.v.Get()
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// TLSConfig is a server configuration serving the reloaded pair, TLS 1.2
// at least.
func (r *certReloader) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS12}
}
