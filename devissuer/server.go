package devissuer

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/internal/foundation/framing"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

// Paths the issuer serves.
const (
	PathDiscovery    = "/.well-known/openid-configuration"
	PathJWKS         = "/openid/v1/jwks"
	PathTokenReviews = "/apis/authentication.k8s.io/v1/tokenreviews"
)

const maxBody = 1 << 20

var codecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	if err := authv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := authzv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme)
}()

// Handler returns the issuer's HTTP API. It does not serve TLS itself; see
// [Issuer.Serve].
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathDiscovery, i.serveDiscovery)
	mux.HandleFunc("GET "+PathJWKS, i.serveJWKS)
	mux.HandleFunc("POST "+PathTokenReviews, i.serveTokenReview)
	mux.HandleFunc("POST "+PathToken, i.serveToken)
	mux.HandleFunc("POST "+PathSubjectAccessReviews, i.serveSubjectAccessReview)
	mux.HandleFunc("DELETE /api/v1/namespaces/{namespace}/pods/{name}", i.serveDeletePod)
	mux.HandleFunc("GET /api/v1/pods", i.servePods)
	mux.HandleFunc("GET /api/v1/serviceaccounts", i.serveServiceAccounts)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	return mux
}

func (i *Issuer) serveDiscovery(w http.ResponseWriter, r *http.Request) {
	// Like the API server without --service-account-jwks-uri, the JWKS URI
	// follows the address discovery was fetched from.
	doc := map[string]any{
		"issuer":                                i.issuer,
		"jwks_uri":                              "https://" + r.Host + PathJWKS,
		"token_endpoint":                        "https://" + r.Host + PathToken,
		"grant_types_supported":                 []string{"client_credentials"},
		"response_types_supported":              []string{"id_token"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{string(i.alg)},
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeJSON(w, http.StatusOK, doc)
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Content-Type", "application/jwk-set+json")
	b, err := json.Marshal(i.JWKS())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b)
}

// authorize lets the reviewer token through. Any other valid token of this
// issuer is authenticated but not authorized (403), as a service account
// without system:auth-delegator is on the API server; anything else is 401.
func (i *Issuer) authorize(w http.ResponseWriter, r *http.Request, verb, resource, group string) bool {
	authz := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(authz, "Bearer ")
	if ok && i.isReviewer(tok) {
		return true
	}
	if ok {
		if st := i.Review(tok, nil); st.Authenticated {
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
				fmt.Sprintf("%s is forbidden: User %q cannot %s resource %q in API group %q at the cluster scope",
					strings.TrimSuffix(resource+"."+group, "."), st.User.Username, verb, resource, group))
			return false
		}
	}
	writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	return false
}

func (i *Issuer) serveTokenReview(w http.ResponseWriter, r *http.Request) {
	i.reviews.Add(1)
	if !i.authorize(w, r, "create", "tokenreviews", "authentication.k8s.io") {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeStatus(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, "reading TokenReview: "+err.Error())
		return
	}
	// JSON or protobuf, as the API server accepts; client-go sends protobuf.
	var tr authv1.TokenReview
	obj, gvk, err := codecs.UniversalDeserializer().Decode(body, nil, &tr)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding TokenReview: "+err.Error())
		return
	}
	if _, ok := obj.(*authv1.TokenReview); !ok || *gvk != authv1.SchemeGroupVersion.WithKind("TokenReview") {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("want kind TokenReview, apiVersion %s; got %s", authv1.SchemeGroupVersion, gvk))
		return
	}
	tr.SetGroupVersionKind(*gvk)
	if tr.Spec.Token == "" {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "TokenReview.authentication.k8s.io is invalid: spec.token: Required value")
		return
	}
	tr.Status = i.Review(tr.Spec.Token, tr.Spec.Audiences)
	tr.CreationTimestamp = metav1.Time{}
	writeJSON(w, http.StatusCreated, tr)
}

func (i *Issuer) serveDeletePod(w http.ResponseWriter, r *http.Request) {
	if !i.authorize(w, r, "delete", "pods", "") {
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if err := i.DeletePod(ns, name); err != nil {
		if errors.Is(err, ErrNoSuchPod) {
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", name))
			return
		}
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: name, Kind: "pods"},
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reason,
		Code:     int32(code), //nolint:gosec // HTTP status codes fit.
	})
}

// Server is a running issuer: an HTTPS listener on loopback.
type Server struct {
	// URL is the https:// base URL the issuer is served on.
	URL string
	srv *http.Server
	lis net.Listener
	err chan error
}

// Serve starts serving the issuer's API over HTTPS on addr (e.g.
// "127.0.0.1:8443"; port 0 picks a free one), with a serving certificate
// for the loopback names signed by the state directory's CA, and writes a
// kubeconfig for it to the state directory. It returns once the listener is
// open; Close stops it.
func (i *Issuer) Serve(addr string, logger *slog.Logger) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("devissuer: listen address %q: %w", addr, err)
	}
	hosts := append([]string{}, pki.LoopbackHosts...)
	if host != "" && !slices.Contains(hosts, host) {
		hosts = append(hosts, host)
	}
	tc, err := i.ca.ServerTLS(hosts...)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("devissuer: %w", err)
	}
	s := &Server{
		URL: "https://" + lis.Addr().String(),
		lis: lis,
		err: make(chan error, 1),
	}
	if err := i.writeKubeconfig(s.URL); err != nil {
		_ = lis.Close()
		return nil, err
	}
	h := i.Handler()
	if logger != nil {
		h = logRequests(logger, h)
	}
	// HTTP/1.x framing checked on the wire, as every callerauth server's
	// (internal/foundation/framing): an ambiguous request is refused at
	// once, never read one way and held.
	tc.NextProtos = []string{"h2", "http/1.1"}
	s.srv = &http.Server{Handler: refuseMalformed(h), ConnContext: framing.ConnContext, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}
	go func() {
		s.err <- s.srv.Serve(framing.Listener(lis, tc, 10*time.Second, http.DefaultMaxHeaderBytes+4096))
	}()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// Wait blocks until the server stops and returns why.
func (s *Server) Wait() error {
	if err := <-s.err; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// refuseMalformed answers a request whose framing the connection's
// reader refused: 400, Connection: close.
func refuseMalformed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := framing.Refused(r); ok {
			w.Header().Set("Connection", "close")
			http.Error(w, p.Text, http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// logRequests logs method, path and status; never headers or bodies, so
// never a token.
func logRequests(l *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		l.Info("request", "method", r.Method, "path", r.URL.Path, "status", sw.code)
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) { w.code = code; w.ResponseWriter.WriteHeader(code) }

// Unwrap lets http.ResponseController reach the connection's writer (a
// watch flushes each event).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// kubeconfig is the v1 Config shape, written without client-go.
type kubeconfig struct {
	APIVersion     string       `json:"apiVersion"`
	Kind           string       `json:"kind"`
	Clusters       []namedEntry `json:"clusters"`
	Users          []namedEntry `json:"users"`
	Contexts       []namedEntry `json:"contexts"`
	CurrentContext string       `json:"current-context"`
}

type namedEntry struct {
	Name    string         `json:"name"`
	Cluster map[string]any `json:"cluster,omitempty"`
	User    map[string]any `json:"user,omitempty"`
	Context map[string]any `json:"context,omitempty"`
}

func (i *Issuer) writeKubeconfig(url string) error {
	const name = "callerauth-dev"
	kc := kubeconfig{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []namedEntry{{Name: name, Cluster: map[string]any{
			"server":                     url,
			"certificate-authority-data": base64.StdEncoding.EncodeToString(i.ca.PEM),
		}}},
		Users:          []namedEntry{{Name: "reviewer", User: map[string]any{"tokenFile": i.ReviewerTokenFile()}}},
		Contexts:       []namedEntry{{Name: name, Context: map[string]any{"cluster": name, "user": "reviewer"}}},
		CurrentContext: name,
	}
	b, err := yaml.Marshal(kc)
	if err != nil {
		return fmt.Errorf("devissuer: %w", err)
	}
	return pki.WriteFileAtomic(i.KubeconfigFile(), b, 0o600)
}

// TLSConfig returns a client TLS configuration that trusts the issuer's
// serving CA.
func (i *Issuer) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: i.ca.Pool(), MinVersion: tls.VersionTLS12}
}
