package devissuer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/callerauth/callerauth/internal/foundation/pki"
)

// DefaultIssuer is the iss of minted tokens unless the state directory was
// created with another. Like a real cluster's issuer
// (https://kubernetes.default.svc.cluster.local), it is a name, not the
// address the issuer is served on: discovery is fetched from the serving
// address and names this issuer.
const DefaultIssuer = "https://dev-issuer.callerauth.local"

// Defaults.
const (
	// MinLifetime is the shortest lifetime TokenRequest allows.
	MinLifetime = 600 * time.Second
	// DefaultMaxLifetime is the longest lifetime minted unless configured.
	DefaultMaxLifetime = 24 * time.Hour
	// DefaultLeeway is the clock skew allowed when reviewing exp and nbf,
	// the same minute the API server allows.
	DefaultLeeway = time.Minute
)

// Algorithm is a signing algorithm the issuer can use.
type Algorithm string

// Supported signing algorithms.
const (
	ES256 Algorithm = "ES256"
	RS256 Algorithm = "RS256"
)

// Config configures [Open]. The zero value is usable.
type Config struct {
	// Issuer is the iss claim. It is stored in the state directory when the
	// directory is created; opening an existing directory with a different
	// Issuer is an error. Default: the stored one, or [DefaultIssuer].
	Issuer string
	// Algorithm is used when the signing key is first generated. Default
	// ES256. An existing key keeps its algorithm.
	Algorithm Algorithm
	// MaxLifetime is the longest token lifetime minted. Default 24h; must be
	// at least 600 s.
	MaxLifetime time.Duration
	// APIAudiences are the audiences a TokenReview without audiences is
	// checked against, as the API server's --api-audiences. Default: the
	// issuer.
	APIAudiences []string
	// Leeway is the clock skew allowed on exp and nbf when reviewing.
	// Default 1 minute, as the API server. Set a negative value for none.
	Leeway time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Issuer mints and reviews service-account tokens, with no cluster.
//
//	iss, err := devissuer.Open(dir, devissuer.Config{})
//	srv, err := iss.Serve("127.0.0.1:0", nil) // TokenReview, discovery, JWKS; writes iss.KubeconfigFile()
//	tok, err := iss.Mint(devissuer.TokenRequest{Namespace: "demo", ServiceAccount: "client",
//		Audiences: []string{"my-service"}})
//	// kube.New(kube.Config{Kubeconfig: iss.KubeconfigFile(), ...}) reviews tok.Token
//
// devissuertest.Serve does the first two for a test. It is safe for
// concurrent use.
type Issuer struct {
	dir          string
	issuer       string
	alg          Algorithm
	keyMu        sync.RWMutex // key, kid, signer, previous
	key          crypto.Signer
	kid          string
	signer       jose.Signer
	previous     []publishedKey // earlier keys still published (RotateKey), oldest first
	maxLifetime  time.Duration
	apiAudiences []string
	leeway       time.Duration
	now          func() time.Time
	reviewer     string
	ca           *pki.CA

	regMu   sync.Mutex
	reg     *registry
	regStat os.FileInfo
	// seen are the registries read lately, by revision, so that a watch
	// from a recent resource version replays what changed since
	// (watch.go); at most maxSeen.
	seen map[uint64]*registry

	mu sync.Mutex // the OAuth2 client registry

	reviews atomic.Int64 // TokenReviews received
	// accessReviews: SubjectAccessReviews received.
	accessReviews atomic.Int64
}

// Reviews is how many TokenReviews the served API has received: what a
// flood of bad tokens costs the reviewer.
func (i *Issuer) Reviews() int64 { return i.reviews.Load() }

// State directory file names.
const (
	fileSigningKey    = "signing-key.pem"
	fileIssuer        = "issuer"
	fileReviewerToken = "reviewer-token"
	// FileCA is the CA certificate that signs the serving certificate.
	FileCA = "ca.crt"
	// FileKubeconfig is written by Serve: a kubeconfig for the running
	// issuer, authenticated with the reviewer token.
	FileKubeconfig = "kubeconfig"
)

// Open loads the issuer kept in dir, creating the directory, a signing key,
// a serving CA and a reviewer token on first use.
func Open(dir string, cfg Config) (*Issuer, error) {
	if dir == "" {
		return nil, errors.New("devissuer: a state directory is required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("devissuer: %w", err)
	}
	i := &Issuer{dir: dir, maxLifetime: cfg.MaxLifetime, leeway: cfg.Leeway, now: cfg.Now}
	if i.maxLifetime == 0 {
		i.maxLifetime = DefaultMaxLifetime
	}
	if i.maxLifetime < MinLifetime {
		return nil, fmt.Errorf("devissuer: maximum token lifetime %s is below the minimum %s", i.maxLifetime, MinLifetime)
	}
	switch {
	case i.leeway == 0:
		i.leeway = DefaultLeeway
	case i.leeway < 0:
		i.leeway = 0
	}
	if i.now == nil {
		i.now = time.Now
	}
	// Two processes opening a new state directory at once (an issuer
	// starting while a token is minted) must not each create a key: the
	// first creates, the second loads what the first wrote.
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if i.issuer, err = i.loadIssuer(cfg.Issuer); err != nil {
		return nil, err
	}
	i.apiAudiences = cfg.APIAudiences
	if len(i.apiAudiences) == 0 {
		i.apiAudiences = []string{i.issuer}
	}
	if err := i.loadKey(cfg.Algorithm); err != nil {
		return nil, err
	}
	if i.reviewer, err = i.loadReviewerToken(); err != nil {
		return nil, err
	}
	if i.ca, err = pki.LoadCA(dir); errors.Is(err, fs.ErrNotExist) {
		if i.ca, err = pki.NewCA("callerauth dev issuer CA"); err == nil {
			err = i.ca.SaveCA(dir)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("devissuer: serving CA: %w", err)
	}
	return i, nil
}

// lockDir holds an exclusive advisory lock on dir/.lock until the returned
// function is called.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devissuer: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("devissuer: locking %s: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

func (i *Issuer) loadIssuer(want string) (string, error) {
	p := filepath.Join(i.dir, fileIssuer)
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if want == "" {
			want = DefaultIssuer
		}
		if !strings.HasPrefix(want, "https://") {
			return "", fmt.Errorf("devissuer: issuer %q must be an https:// URL", want)
		}
		if err := pki.WriteFileAtomic(p, []byte(want+"\n"), 0o644); err != nil {
			return "", err
		}
		return want, nil
	case err != nil:
		return "", fmt.Errorf("devissuer: %w", err)
	}
	stored := strings.TrimSpace(string(b))
	if want != "" && want != stored {
		return "", fmt.Errorf("devissuer: state directory %s belongs to issuer %q, not %q; use another directory", i.dir, stored, want)
	}
	return stored, nil
}

func (i *Issuer) loadKey(alg Algorithm) error {
	p := filepath.Join(i.dir, fileSigningKey)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		key, err := generateKey(alg)
		if err != nil {
			return err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return fmt.Errorf("devissuer: %w", err)
		}
		b = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		if err := pki.WriteFileAtomic(p, b, 0o600); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("devissuer: %w", err)
	}
	k, err := pki.ParsePrivateKey(b)
	if err != nil {
		return fmt.Errorf("devissuer: %s: %w", p, err)
	}
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return fmt.Errorf("devissuer: %s: only P-256 ECDSA keys are supported", p)
		}
		i.key, i.alg = k, ES256
	case *rsa.PrivateKey:
		i.key, i.alg = k, RS256
	default:
		return fmt.Errorf("devissuer: %s: unsupported key type %T", p, k)
	}
	if alg != "" && alg != i.alg {
		return fmt.Errorf("devissuer: state directory %s holds an %s key, not %s", i.dir, i.alg, alg)
	}
	i.kid, i.signer, err = signerFor(i.key, i.alg)
	return err
}

// publishedKey is a verification key the JWKS lists.
type publishedKey struct {
	kid string
	pub crypto.PublicKey
}

// signerFor returns the API server's key id for key —
// base64url(SHA-256(PKIX public key)) — and a signer with it.
func signerFor(key crypto.Signer, alg Algorithm) (string, jose.Signer, error) {
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", nil, fmt.Errorf("devissuer: %w", err)
	}
	sum := sha256.Sum256(der)
	kid := base64.RawURLEncoding.EncodeToString(sum[:])
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(alg), Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
	if err != nil {
		return "", nil, fmt.Errorf("devissuer: %w", err)
	}
	return kid, signer, nil
}

// RotateKey makes a new signing key of the issuer's algorithm, as an API
// server whose --service-account-key-file gains a key: tokens are signed
// with the new key from now on, and the previous keys stay published (and
// accepted by TokenReview) until RetireKey. In memory only: a reopened
// state directory signs with its stored key again. It returns the new kid.
func (i *Issuer) RotateKey() (string, error) {
	key, err := generateKey(i.alg)
	if err != nil {
		return "", err
	}
	kid, signer, err := signerFor(key, i.alg)
	if err != nil {
		return "", err
	}
	i.keyMu.Lock()
	defer i.keyMu.Unlock()
	i.previous = append(i.previous, publishedKey{kid: i.kid, pub: i.key.Public()})
	i.key, i.kid, i.signer = key, kid, signer
	return kid, nil
}

// RetireKey stops publishing a previous key: it leaves the JWKS and
// TokenReview refuses the tokens it signed, as when the API server drops
// it. The signing key cannot be retired.
func (i *Issuer) RetireKey(kid string) error {
	i.keyMu.Lock()
	defer i.keyMu.Unlock()
	for n, k := range i.previous {
		if k.kid == kid {
			i.previous = slices.Delete(i.previous, n, n+1)
			return nil
		}
	}
	if kid == i.kid {
		return fmt.Errorf("devissuer: %s is the signing key; rotate first", kid)
	}
	return fmt.Errorf("devissuer: no previous key %q", kid)
}

// signing is the current signer and its kid.
func (i *Issuer) signing() (jose.Signer, string) {
	i.keyMu.RLock()
	defer i.keyMu.RUnlock()
	return i.signer, i.kid
}

// verificationKey is the published public key of kid, if any.
func (i *Issuer) verificationKey(kid string) (crypto.PublicKey, bool) {
	i.keyMu.RLock()
	defer i.keyMu.RUnlock()
	if kid == i.kid {
		return i.key.Public(), true
	}
	for _, k := range i.previous {
		if k.kid == kid {
			return k.pub, true
		}
	}
	return nil, false
}

func generateKey(alg Algorithm) (crypto.Signer, error) {
	switch alg {
	case "", ES256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case RS256:
		return rsa.GenerateKey(rand.Reader, 2048)
	default:
		return nil, fmt.Errorf("devissuer: unsupported algorithm %q (want ES256 or RS256)", alg)
	}
}

func (i *Issuer) loadReviewerToken() (string, error) {
	p := filepath.Join(i.dir, fileReviewerToken)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return "", fmt.Errorf("devissuer: %w", err)
		}
		tok := "devissuer-reviewer-" + hex.EncodeToString(raw)
		return tok, pki.WriteFileAtomic(p, []byte(tok+"\n"), 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("devissuer: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Issuer returns the iss of the tokens this issuer mints.
func (i *Issuer) Issuer() string { return i.issuer }

// KeyID returns the kid of the signing key.
func (i *Issuer) KeyID() string {
	_, kid := i.signing()
	return kid
}

// Algorithm returns the signing algorithm.
func (i *Issuer) Algorithm() Algorithm { return i.alg }

// StateDir returns the state directory.
func (i *Issuer) StateDir() string { return i.dir }

// ReviewerTokenFile returns the path of the bearer token that may create
// TokenReviews (and delete pods) on the served API.
func (i *Issuer) ReviewerTokenFile() string { return filepath.Join(i.dir, fileReviewerToken) }

// CAFile returns the path of the CA certificate the serving certificate is
// signed by.
func (i *Issuer) CAFile() string { return filepath.Join(i.dir, FileCA) }

// KubeconfigFile returns the path Serve writes its kubeconfig to.
func (i *Issuer) KubeconfigFile() string { return filepath.Join(i.dir, FileKubeconfig) }

// JWKS returns the public verification keys.
func (i *Issuer) JWKS() jose.JSONWebKeySet {
	i.keyMu.RLock()
	defer i.keyMu.RUnlock()
	set := jose.JSONWebKeySet{}
	for _, k := range append([]publishedKey{{kid: i.kid, pub: i.key.Public()}}, i.previous...) {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.pub, KeyID: k.kid, Algorithm: string(i.alg), Use: "sig"})
	}
	return set
}

func (i *Issuer) isReviewer(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(i.reviewer)) == 1
}

// IssueServingCert signs a serving certificate for hosts (DNS names or IP
// addresses) with the issuer's CA — the CA in CAFile, which the dev
// issuer's own HTTPS listener also uses — and writes it to dir as tls.crt
// and tls.key (mode 0600). It is for the services of a local walk: a pdp or
// a platform-connector serving TLS that clients trust through CAFile.
func (i *Issuer) IssueServingCert(dir string, hosts ...string) (certFile, keyFile string, err error) {
	if len(hosts) == 0 {
		return "", "", errors.New("devissuer: a serving certificate needs at least one host")
	}
	certPEM, keyPEM, err := i.ca.Issue(hosts[0], hosts...)
	if err != nil {
		return "", "", err
	}
	return writePair(dir, certPEM, keyPEM)
}

// IssueClientCert writes dir/tls.crt and dir/tls.key: a client
// certificate from the issuer's CA naming user (its common name) and
// groups (its organizations), as Kubernetes reads one — for a caller of
// callerauth-proxy --client-ca-file without a token.
func (i *Issuer) IssueClientCert(dir, user string, groups ...string) (certFile, keyFile string, err error) {
	if user == "" {
		return "", "", errors.New("devissuer: a client certificate needs a user")
	}
	certPEM, keyPEM, err := i.ca.IssueClient(user, groups...)
	if err != nil {
		return "", "", err
	}
	return writePair(dir, certPEM, keyPEM)
}

func writePair(dir string, certPEM, keyPEM []byte) (certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("devissuer: %w", err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := pki.WriteFileAtomic(certFile, certPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := pki.WriteFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
