// Package kubeapi starts a real kube-apiserver and etcd on loopback for the
// integration tests: random ports, a temporary directory, a service-account
// signing key and a static admin token. The binaries are built from Go
// modules by `make test` (test/tools/kube) and found through
// $CALLERAUTH_KUBE_BIN, or under .cache/kube/<version> at the repository
// root.
package kubeapi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/callerauth/callerauth/internal/kit/loopback"
	"github.com/callerauth/callerauth/internal/kit/proc"
)

// Version is the Kubernetes version the harness builds and runs.
const Version = "v1.37.2"

// Issuer is the service-account issuer the API server is started with.
const Issuer = "https://kubernetes.default.svc.cluster.local"

// AdminToken is the static token of the system:masters user "admin".
const AdminToken = "admin-token"

// Server is a running kube-apiserver with its etcd.
type Server struct {
	// URL is the https:// address of the API server.
	URL string
	// CAFile is the API server's self-signed serving certificate.
	CAFile string
	// Client is a clientset authenticated as admin.
	Client kubernetes.Interface
	// REST is the admin REST configuration.
	REST *rest.Config
	// Dir holds the data, keys and logs.
	Dir string

	procs []*proc.Process
	// api is the API server's process (also in procs); apiArgs its
	// flags, for Restart.
	api     *proc.Process
	apiBin  string
	apiArgs []string
	netns   string
}

// BinDir returns where the kube-apiserver and etcd binaries are expected.
func BinDir() (string, error) {
	if d := os.Getenv("CALLERAUTH_KUBE_BIN"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if b, _ := os.ReadFile(filepath.Join(dir, "go.mod")); strings.Contains(string(b), "module github.com/callerauth/callerauth\n") {
				return filepath.Join(dir, ".cache", "kube", Version), nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubeapi: repository root not found and CALLERAUTH_KUBE_BIN not set")
		}
		dir = parent
	}
}

// Start starts etcd and the API server and waits until the API server is
// ready. Stop them with Stop. extra are more API server flags
// (--authentication-config=FILE, say).
func Start(ctx context.Context, extra ...string) (*Server, error) {
	return StartWith(ctx, Options{Extra: extra})
}

// Options say how to start the API server; the zero value is Start's.
type Options struct {
	// Extra are more API server flags.
	Extra []string
	// Address is where the API server listens and what it advertises.
	// Default 127.0.0.1, with no endpoints for the kubernetes Service;
	// another address gets them (pods reach the API server there).
	Address string
	// NetNS runs etcd and the API server in that network namespace
	// (/run/netns/NAME): Address is one of its addresses.
	NetNS string
	// Tokens are more lines of the static token file
	// (token,user,uid,"group1,group2").
	Tokens []string
}

// StartWith starts etcd and the API server as o says and waits until the
// API server is ready. Stop them with Stop.
func StartWith(ctx context.Context, o Options) (_ *Server, err error) {
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("kubeapi: %s not found in %s: `make test` builds it (make kube-tools)", b, bin)
		}
	}
	dir, err := os.MkdirTemp("", "callerauth-kubeapi-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, netns: o.NetNS}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	ports, err := loopback.Ports(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, secure := ports[0], ports[1], ports[2]

	if err := s.writeFiles(o.Tokens); err != nil {
		return nil, err
	}
	clientURL := fmt.Sprintf("http://%s:%d", o.Address, etcdClient)
	peerURL := fmt.Sprintf("http://%s:%d", o.Address, etcdPeer)
	if err := s.run(filepath.Join(bin, "etcd"), "etcd.log",
		"--name=callerauth", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=callerauth="+peerURL, "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 30*time.Second, func() error { return get(http.DefaultClient, clientURL+"/health", "") }); err != nil {
		return nil, fmt.Errorf("kubeapi: etcd did not become healthy: %w\n%s", err, s.logTail("etcd.log"))
	}
	s.apiBin = filepath.Join(bin, "kube-apiserver")
	reconciler := "--endpoint-reconciler-type=none" // a loopback address is no endpoint
	if o.Address != "127.0.0.1" {
		reconciler = "--endpoint-reconciler-type=lease"
	}
	s.apiArgs = append([]string{
		"--bind-address=" + o.Address, "--advertise-address=" + o.Address,
		fmt.Sprintf("--secure-port=%d", secure), "--cert-dir=" + filepath.Join(dir, "certs"),
		"--etcd-servers=" + clientURL, "--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=" + Issuer,
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--api-audiences=" + Issuer,
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC", "--anonymous-auth=true",
		"--audit-policy-file=" + filepath.Join(dir, "audit-policy.yaml"), "--audit-log-path=" + filepath.Join(dir, "audit.log"),
		reconciler,
		// As clusters do (kubeadm's default): a privileged pod is then
		// Pod Security admission's to refuse, as test/chart checks.
		"--allow-privileged=true"}, o.Extra...)
	s.URL = fmt.Sprintf("https://%s:%d", o.Address, secure)
	s.CAFile = filepath.Join(dir, "certs", "apiserver.crt")
	if err := s.startAPIServer(ctx); err != nil {
		return nil, err
	}
	s.REST = &rest.Config{Host: s.URL, BearerToken: AdminToken, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, QPS: 100, Burst: 200}
	if s.Client, err = kubernetes.NewForConfig(s.REST); err != nil {
		return nil, err
	}
	// Let anyone read OIDC discovery and the JWKS, as clusters that publish
	// their issuer do.
	_, err = s.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "callerauth-issuer-discovery"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:unauthenticated"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubeapi: granting issuer discovery: %w", err)
	}
	return s, nil
}

func (s *Server) writeFiles(tokens []string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(strings.Join(append([]string{AdminToken + `,admin,admin-uid,"system:masters"`}, tokens...), "\n") + "\n"),
		// Every request a service account makes, at Metadata level: what a
		// service running as its chart's account used (Requests).
		"audit-policy.yaml": []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n    userGroups: [\"system:serviceaccounts\"]\n  - level: None\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(s.Dir, "certs"), 0o700)
}

func (s *Server) run(bin, logName string, args ...string) error {
	_, err := s.runProcess(bin, logName, args...)
	return err
}

func (s *Server) runProcess(bin, logName string, args ...string) (*proc.Process, error) {
	logf, err := os.OpenFile(filepath.Join(s.Dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(proc.Spec{Bin: bin, Args: args, Output: logf, Group: true, NetNS: s.netns})
	if err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("kubeapi: %w", err)
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// startAPIServer starts the API server with its flags and waits until it
// is ready.
func (s *Server) startAPIServer(ctx context.Context) error {
	p, err := s.runProcess(s.apiBin, "kube-apiserver.log", s.apiArgs...)
	if err != nil {
		return err
	}
	s.api = p
	if err := waitFor(ctx, 90*time.Second, func() error {
		c, err := s.httpClient()
		if err != nil {
			return err
		}
		return get(c, s.URL+"/readyz", AdminToken)
	}); err != nil {
		return fmt.Errorf("kubeapi: kube-apiserver did not become ready: %w\n%s", err, s.logTail("kube-apiserver.log"))
	}
	return nil
}

// StopAPIServer stops the API server (SIGTERM, as a rollout does; etcd
// keeps running) and returns once it has exited. StartAPIServer starts it
// again on the same port with the same flags, certificates and data.
func (s *Server) StopAPIServer() error {
	if s.api == nil {
		return errors.New("kubeapi: the API server is not running")
	}
	err := s.api.Stop()
	for i, p := range s.procs {
		if p == s.api {
			s.procs = append(s.procs[:i], s.procs[i+1:]...)
			break
		}
	}
	s.api = nil
	return err
}

// StartAPIServer starts the API server stopped by StopAPIServer and waits
// until it is ready.
func (s *Server) StartAPIServer(ctx context.Context) error {
	if s.api != nil {
		return errors.New("kubeapi: the API server is running")
	}
	return s.startAPIServer(ctx)
}

// Stop stops the API server and etcd and removes the directory.
func (s *Server) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		_ = s.procs[i].Stop()
	}
	s.procs = nil
	if os.Getenv("CALLERAUTH_KEEP_KUBEAPI") == "" {
		_ = os.RemoveAll(s.Dir)
	}
}

// Log is the tail of the API server's log.
func (s *Server) Log() string { return s.logTail("kube-apiserver.log") }

func (s *Server) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return name + ":\n" + string(b)
}

func (s *Server) httpClient() (*http.Client, error) {
	b, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

func get(c *http.Client, url, bearer string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func waitFor(ctx context.Context, limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Objects the tests create.

// Namespace creates a namespace.
func (s *Server) Namespace(ctx context.Context, name string) error {
	_, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

// ServiceAccount creates a service account and returns its UID.
func (s *Server) ServiceAccount(ctx context.Context, ns, name string) (types.UID, error) {
	sa, err := s.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return sa.UID, nil
}

// Node creates a node object (no kubelet) and returns its UID.
func (s *Server) Node(ctx context.Context, name string) (types.UID, error) {
	n, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return n.UID, nil
}

// Pod creates a pod running as serviceAccount, scheduled on node when node
// is not empty, and returns it. No kubelet runs: it stays Pending.
func (s *Server) Pod(ctx context.Context, ns, name, serviceAccount, node string) (*corev1.Pod, error) {
	no := false
	return s.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName:           serviceAccount,
			AutomountServiceAccountToken: &no,
			NodeName:                     node,
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}},
		},
	}, metav1.CreateOptions{})
}

// Token requests a token for a service account with TokenRequest, bound to
// pod when it is not nil.
func (s *Server) Token(ctx context.Context, ns, serviceAccount string, audiences []string, seconds int64, pod *corev1.Pod) (string, error) {
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &seconds}}
	if pod != nil {
		tr.Spec.BoundObjectRef = &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	res, err := s.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, serviceAccount, tr, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return res.Status.Token, nil
}

// RESTAs returns a REST configuration authenticated with a bearer token.
func (s *Server) RESTAs(token string) *rest.Config {
	c := rest.CopyConfig(s.REST)
	c.BearerToken = token
	return c
}

// Request is one API request a service account made, from the audit log.
type Request struct {
	Verb, APIGroup, Resource, Subresource, Namespace string
	Code                                             int
}

// Requests are the requests user made (a service account's username), in
// the order the API server logged them.
func (s *Server) Requests(user string) ([]Request, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, "audit.log"))
	if err != nil {
		return nil, err
	}
	var out []Request
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Stage string `json:"stage"`
			Verb  string `json:"verb"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef *struct {
				APIGroup    string `json:"apiGroup"`
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Namespace   string `json:"namespace"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		// A watch is logged when it starts (it may outlive the test); any
		// other request when it completes.
		if json.Unmarshal([]byte(line), &e) != nil || e.User.Username != user || e.ObjectRef == nil ||
			(e.Stage != "ResponseComplete" && (e.Stage != "ResponseStarted" || e.Verb != "watch")) {
			continue
		}
		out = append(out, Request{Verb: e.Verb, APIGroup: e.ObjectRef.APIGroup, Resource: e.ObjectRef.Resource, Subresource: e.ObjectRef.Subresource,
			Namespace: e.ObjectRef.Namespace, Code: e.ResponseStatus.Code})
	}
	return out, nil
}

// WriteKubeconfig writes a kubeconfig for the admin user to path, for
// binaries under test that take --kubeconfig.
func (s *Server) WriteKubeconfig(path string) error { return s.WriteKubeconfigAs(path, AdminToken) }

// WriteKubeconfigAs writes a kubeconfig that authenticates with token (a
// service account's, say: the binary then has that account's permissions
// and no others).
func (s *Server) WriteKubeconfigAs(path, token string) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, s.URL, s.CAFile, token)
	return os.WriteFile(path, []byte(kc), 0o600)
}

// ForTests is a step for e2e.Main: it starts a kube-apiserver (within 3
// minutes) into *s, and returns how to stop it.
func ForTests(s **Server) func() (func(), error) {
	return func() (func(), error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		srv, err := Start(ctx)
		if err != nil {
			return nil, fmt.Errorf("cannot start the kube-apiserver these tests need: %w", err)
		}
		*s = srv
		return srv.Stop, nil
	}
}
