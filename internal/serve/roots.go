package serve

// The images hold no /etc/ssl (FROM scratch, docs/deploy.md): the Mozilla
// root certificates in the binary stand in, used only where the system has
// none — so a tenant's identity provider with a public certificate is
// trusted in the image as on a host. A file or directory the system names
// (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs) always wins.
import _ "golang.org/x/crypto/x509roots/fallback"
