// Package pki makes the small certificate authorities that the dev issuer
// and the tests serve TLS with: an ECDSA P-256 CA and a serving certificate
// for loopback names, kept as PEM files.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// LoopbackHosts are the names a loopback serving certificate is valid for.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// CA is a certificate authority with its key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the certificate in PEM form, for CA files and kubeconfigs.
	PEM []byte
}

// NewCA creates a self-signed CA valid for ten years.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parsing CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue signs a serving certificate for hosts (DNS names or IP addresses),
// valid for one year, and returns it with its key in PEM form.
func (ca *CA) Issue(commonName string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: commonName}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.sign(tmpl, "serving")
}

// IssueClient signs a client certificate, valid for one year, naming a
// user as Kubernetes reads one: the common name is the username, each
// organization a group.
func (ca *CA) IssueClient(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, "client")
}

// sign completes tmpl (serial, validity, key usage), signs it with a new
// P-256 key and returns both in PEM form.
func (ca *CA) sign(tmpl *x509.Certificate, what string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generating %s key: %w", what, err)
	}
	now := time.Now()
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial(), now.Add(-time.Hour), now.AddDate(1, 0, 0)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: signing %s certificate: %w", what, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: encoding %s key: %w", what, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// ServerTLS returns a TLS configuration serving a certificate for hosts.
func (ca *CA) ServerTLS(hosts ...string) (*tls.Config, error) {
	certPEM, keyPEM, err := ca.Issue(hosts[0], hosts...)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: loading serving key pair: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteCA writes the CA certificate to path (0644) and returns path.
func (ca *CA) WriteCA(path string) (string, error) {
	if err := os.WriteFile(path, ca.PEM, 0o644); err != nil { //nolint:gosec // a CA certificate is public.
		return "", fmt.Errorf("pki: writing CA certificate: %w", err)
	}
	return path, nil
}

// SaveCA writes the CA certificate and key as ca.crt and ca.key in dir.
func (ca *CA) SaveCA(dir string) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return fmt.Errorf("pki: encoding CA key: %w", err)
	}
	if _, err := ca.WriteCA(filepath.Join(dir, "ca.crt")); err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// LoadCA reads ca.crt and ca.key from dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", filepath.Join(dir, "ca.crt"))
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: parsing %s: %w", filepath.Join(dir, "ca.crt"), err)
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", filepath.Join(dir, "ca.key"), err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("pki: %s: want an ECDSA key, got %T", filepath.Join(dir, "ca.key"), key)
	}
	return &CA{Cert: cert, Key: ec, PEM: certPEM}, nil
}

// ParsePrivateKey decodes the first PEM block of b as a PKCS#8, PKCS#1 or
// SEC 1 private key.
func ParsePrivateKey(b []byte) (any, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	switch blk.Type {
	case "PRIVATE KEY":
		return x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", blk.Type)
	}
}

// WriteFileAtomic writes data to a temporary file beside path and renames it
// into place, so that a reader never sees a partial file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone after a successful rename
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("pki: writing %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms.
	}
	return n
}
