package serve

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCertCheckInterval is how often the serving key pair's files are
// looked at for a change.
const DefaultCertCheckInterval = 10 * time.Second

// CertReloader serves a key pair from files and picks up a new one when the
// files change — cert-manager renews, kubelet swaps the Secret's ..data
// symlink — without a restart. At most once per interval, a handshake looks
// at the files' sizes and modification times; when they changed, the pair is
// loaded again. A pair that fails to load (the certificate written, the key
// not yet) keeps the previous one serving and is logged once.
type CertReloader struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger
	cert              atomic.Pointer[tls.Certificate]
	mu                sync.Mutex // one check at a time
	checked           time.Time
	sig, failedSig    string
}

// NewCertReloader loads the key pair; a pair that cannot be loaded now is
// an error (the service must not start without one). interval <= 0 means
// DefaultCertCheckInterval.
func NewCertReloader(certFile, keyFile string, interval time.Duration, log *slog.Logger) (*CertReloader, error) {
	if interval <= 0 {
		interval = DefaultCertCheckInterval
	}
	if log == nil {
		log = slog.Default()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, interval: interval, log: log}
	r.sig = r.signature()
	cert, err := load(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serve: --tls-cert-file/--tls-key-file: %w", err)
	}
	r.cert.Store(cert)
	r.checked = time.Now()
	return r, nil
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

func (r *CertReloader) signature() string {
	var s string
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%d:%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			s += "missing;"
		}
	}
	return s
}

// Certificate returns the pair being served, reloading it first when its
// files changed and the interval has passed.
func (r *CertReloader) Certificate() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < r.interval {
		return r.cert.Load()
	}
	r.checked = time.Now()
	sig := r.signature()
	if sig == r.sig || sig == r.failedSig {
		return r.cert.Load()
	}
	cert, err := load(r.certFile, r.keyFile)
	if err != nil {
		r.failedSig = sig
		r.log.Warn("serve: the serving certificate changed on disk but does not load; the previous one keeps serving",
			"cert", r.certFile, "key", r.keyFile, "err", err)
		return r.cert.Load()
	}
	r.sig, r.failedSig = sig, ""
	r.cert.Store(cert)
	r.log.Info("serve: serving a new certificate", "cert", r.certFile, "serial", cert.Leaf.SerialNumber.String(),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return cert
}

// GetCertificate is tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// TLSConfig is a server configuration serving the reloaded pair, TLS 1.2
// at least.
func (r *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS12}
}
