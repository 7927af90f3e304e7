// Package hydra starts Ory Hydra v2.3.0 on loopback as a tenant's real
// OAuth2/OIDC identity provider for the end-to-end tests: TLS from a CA the
// test holds, JWT access tokens, an in-memory database, and clients
// registered through the admin API for the client-credentials grant. The
// binary is built by `make hydra-tools` (test/tools/hydra) and found through
// $CALLERAUTH_HYDRA_BIN, or under .cache/hydra/<version> at the repository
// root.
package hydra

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/proc"
)

// Version is the Hydra release the harness builds and runs.
const Version = "v2.3.0"

// Server is a running Hydra.
type Server struct {
	// Issuer is the iss of its tokens (with Hydra's trailing slash); also
	// where discovery is served.
	Issuer string
	// TokenURL is the OAuth2 token endpoint.
	TokenURL string
	admin    string
	client   *http.Client
	proc     *proc.Process
	log      *capture.Buffer
}

// Bin finds the hydra binary.
func Bin() (string, error) {
	dir := os.Getenv("CALLERAUTH_HYDRA_BIN")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && filepath.Base(filepath.Dir(d)) != "tools" {
				if _, err := os.Stat(filepath.Join(d, "test", "tools", "hydra")); err == nil {
					dir = filepath.Join(d, ".cache", "hydra", Version)
					break
				}
			}
			if filepath.Dir(d) == d {
				return "", errors.New("hydra: no repository root above the working directory")
			}
		}
	}
	bin := filepath.Join(dir, "hydra")
	if _, err := os.Stat(bin); err != nil { //nolint:gosec // the harness's own cache path, or the developer's CALLERAUTH_HYDRA_BIN.
		return "", fmt.Errorf("hydra: %s is missing: run make hydra-tools (make test does): %w", bin, err)
	}
	return bin, nil
}

// Start runs Hydra serving TLS with a certificate from ca, in dir. ttl is
// the lifetime of its access tokens (0: Hydra's default, 1 h).
func Start(ctx context.Context, dir string, ca *pki.CA, ttl time.Duration) (*Server, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	ports, err := loopback.Ports(2)
	if err != nil {
		return nil, err
	}
	pub, adm := ports[0], ports[1]
	certPEM, keyPEM, err := ca.Issue("127.0.0.1", "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		return nil, err
	}
	issuer := fmt.Sprintf("https://127.0.0.1:%d/", pub)
	cfg := fmt.Sprintf(`serve:
  public:
    host: 127.0.0.1
    port: %[1]d
    tls: {enabled: true, cert: {path: %[3]s}, key: {path: %[4]s}}
  admin:
    host: 127.0.0.1
    port: %[2]d
    tls: {enabled: true, cert: {path: %[3]s}, key: {path: %[4]s}}
urls:
  self: {issuer: %[5]s}
strategies:
  access_token: jwt
secrets:
  system: [callerauth-e2e-hydra-system-secret-0123456789]
log:
  level: warn
`, pub, adm, cert, key, issuer)
	if ttl > 0 {
		cfg += fmt.Sprintf("ttl:\n  access_token: %s\n", ttl)
	}
	cfgFile := filepath.Join(dir, "hydra.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	s := &Server{Issuer: issuer, TokenURL: issuer + "oauth2/token", admin: fmt.Sprintf("https://127.0.0.1:%d", adm),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}},
		log:    &capture.Buffer{}}
	if s.proc, err = proc.Start(proc.Spec{Bin: bin, Args: []string{"serve", "all", "-c", cfgFile}, Env: []string{"DSN=memory"}, Dir: dir, Output: s.log}); err != nil {
		return nil, fmt.Errorf("hydra: %w", err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := s.client.Get(issuer + ".well-known/openid-configuration")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.proc.Done():
			return nil, fmt.Errorf("hydra exited:\n%s", s.log.String())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("hydra did not serve discovery in 60 s:\n%s", s.log.String())
		}
	}
}

// Stop ends Hydra.
func (s *Server) Stop() { _ = s.proc.Stop() }

// Client registers a client-credentials client allowed scopes and the
// audience, and returns its id (the sub of its tokens) and secret.
func (s *Server) Client(id string, scopes []string, audience string) (string, error) {
	body, _ := json.Marshal(map[string]any{"client_id": id, "grant_types": []string{"client_credentials"},
		"scope": strings.Join(scopes, " "), "audience": []string{audience}, "token_endpoint_auth_method": "client_secret_basic"})
	resp, err := s.client.Post(s.admin+"/admin/clients", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("hydra: creating client %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("hydra: creating client %s: %s %s", id, resp.Status, b)
	}
	var out struct {
		Secret string `json:"client_secret"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Secret == "" {
		return "", fmt.Errorf("hydra: creating client %s: no secret in %s", id, b)
	}
	return out.Secret, nil
}

// Log is what Hydra printed.
func (s *Server) Log() string { return s.log.String() }
