package devissuer

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

// PathToken is the OAuth2 token endpoint (RFC 6749 §3.2): the
// client-credentials grant (§4.4), as a tenant's identity provider serves
// it to a refresher.
const PathToken = "/oauth2/token" //nolint:gosec // a URL path, not a credential.

// fileClients holds the registered OAuth2 clients.
const fileClients = "clients.json"

// Client is an OAuth2 client registered with the issuer.
type Client struct {
	// ID is the client_id.
	ID string `json:"client_id"`
	// SecretSHA256 is the hex SHA-256 of the client secret; the secret
	// itself is never stored.
	SecretSHA256 string `json:"secret_sha256"`
	// Subject is the sub of the tokens issued to it.
	Subject string `json:"subject"`
	// Scopes it may ask for; the tokens carry the granted ones as "scp".
	Scopes []string `json:"scopes"`
	// Audiences it may ask for; the first is the default.
	Audiences []string `json:"audiences"`
	// Lifetime of its tokens, in seconds.
	LifetimeSeconds int64 `json:"lifetime_seconds"`
}

// AddClient registers (or replaces) a client and returns its new secret.
func (i *Issuer) AddClient(c Client, lifetime time.Duration) (string, error) {
	var errs []error
	if c.ID == "" || strings.ContainsAny(c.ID, ": \t\n") {
		errs = append(errs, fmt.Errorf("devissuer: client id %q: want a non-empty id without ':' or white space", c.ID))
	}
	if c.Subject == "" {
		errs = append(errs, errors.New("devissuer: a client needs the subject of its tokens"))
	}
	if len(c.Audiences) == 0 || slices.Contains(c.Audiences, "") {
		errs = append(errs, errors.New("devissuer: a client needs at least one non-empty audience"))
	}
	if lifetime == 0 {
		lifetime = DefaultLifetime
	}
	if lifetime < time.Second || lifetime > i.maxLifetime {
		errs = append(errs, fmt.Errorf("devissuer: token lifetime %s: want 1s to %s", lifetime, i.maxLifetime))
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("devissuer: %w", err)
	}
	secret := hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	c.SecretSHA256, c.LifetimeSeconds = hex.EncodeToString(sum[:]), int64(lifetime/time.Second)
	if c.Scopes == nil {
		c.Scopes = []string{} // written as [], never null: the file is read strictly
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	clients, err := i.loadClients()
	if err != nil {
		return "", err
	}
	clients[c.ID] = c
	b, _ := json.MarshalIndent(clients, "", "  ")
	if err := pki.WriteFileAtomic(filepath.Join(i.dir, fileClients), b, 0o600); err != nil {
		return "", err
	}
	return secret, nil
}

func (i *Issuer) loadClients() (map[string]Client, error) {
	b, err := os.ReadFile(filepath.Join(i.dir, fileClients))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Client{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("devissuer: %w", err)
	}
	clients := map[string]Client{}
	if err := ijson.Decode(b, &clients); err != nil {
		return nil, fmt.Errorf("devissuer: %s: %w", fileClients, err)
	}
	return clients, nil
}

// oauthError answers as RFC 6749 §5.2 says.
func oauthError(w http.ResponseWriter, code int, kind, description string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="devissuer"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": kind, "error_description": description})
}

// serveToken is the client-credentials grant: the client authenticates
// with HTTP Basic (or client_id and client_secret in the form), asks for
// scopes it is allowed (all of them by default) and an audience it is
// allowed (its first by default), and gets a token whose sub is its
// subject and whose scp are the granted scopes.
func (i *Issuer) serveToken(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "the body is not a form")
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != "client_credentials" {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", fmt.Sprintf("grant_type %q: this issuer serves client_credentials only", gt))
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	i.mu.Lock()
	clients, err := i.loadClients()
	i.mu.Unlock()
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error", "the client registry cannot be read")
		return
	}
	c, ok := clients[id]
	sum := sha256.Sum256([]byte(secret))
	if !ok || subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(c.SecretSHA256)) != 1 {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "unknown client or wrong secret")
		return
	}
	scopes := c.Scopes
	if s := r.PostForm.Get("scope"); s != "" {
		scopes = strings.Fields(s)
		for _, sc := range scopes {
			if !slices.Contains(c.Scopes, sc) {
				oauthError(w, http.StatusBadRequest, "invalid_scope", fmt.Sprintf("scope %q is not granted to client %s", sc, id))
				return
			}
		}
	}
	aud := c.Audiences[0]
	if a := r.PostForm.Get("audience"); a != "" {
		if !slices.Contains(c.Audiences, a) {
			oauthError(w, http.StatusBadRequest, "invalid_target", fmt.Sprintf("audience %q is not granted to client %s", a, id))
			return
		}
		aud = a
	}
	lifetime := time.Duration(c.LifetimeSeconds) * time.Second
	tok, err := i.MintIdentity(IdentityRequest{Subject: c.Subject, Audiences: []string{aud}, Lifetime: lifetime,
		Claims: map[string]any{"scp": strings.Join(scopes, " "), "client_id": id}})
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok.Token, "token_type": "Bearer",
		"expires_in": json.Number(strconv.FormatInt(int64(lifetime/time.Second), 10)), "scope": strings.Join(scopes, " ")})
}
