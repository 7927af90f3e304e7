package credentials_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/recorder"
	"github.com/callerauth/callerauth/internal/kit/testjwt"
	"github.com/callerauth/callerauth/internal/kit/tokenvolume"
	"github.com/callerauth/callerauth/token"
)

// newTokenDir is a kubelet-style token volume holding first.
func newTokenDir(t *testing.T, first string) *tokenDir {
	t.Helper()
	v, err := tokenvolume.New(filepath.Join(t.TempDir(), "vol"))
	if err != nil {
		t.Fatal(err)
	}
	d := &tokenDir{t: t, v: v}
	d.swap(first)
	return d
}

type tokenDir struct {
	t *testing.T
	v *tokenvolume.Volume
}

func (d *tokenDir) path() string { return d.v.Path() }

func (d *tokenDir) swap(tok string) {
	d.t.Helper()
	if err := d.v.Publish(tok); err != nil {
		d.t.Fatal(err)
	}
}

type tlsServer struct {
	ca     *pki.CA
	caFile string
	rec    *recorder.Recorder
	addr   string
}

func startGRPC(t *testing.T) *tlsServer { return startGRPCB(t) }

// loopbackTLS makes a CA, writes it to a file, and returns a serving TLS
// configuration for the loopback names signed by it.
func loopbackTLS(t testing.TB) (*pki.CA, string, *tls.Config) {
	t.Helper()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := ca.ServerTLS(pki.LoopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	return ca, caFile, tc
}

func startGRPCB(t testing.TB) *tlsServer {
	t.Helper()
	ca, caFile, tc := loopbackTLS(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder.Recorder{}
	srv := rec.NewGRPCServer(grpc.Creds(grpccreds.NewTLS(tc)))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &tlsServer{ca: ca, caFile: caFile, rec: rec, addr: lis.Addr().String()}
}

func startHTTPS(t *testing.T) *tlsServer {
	t.Helper()
	ca, caFile, tc := loopbackTLS(t)
	rec := &recorder.Recorder{}
	srv := httptest.NewUnstartedServer(rec)
	srv.TLS = tc
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &tlsServer{ca: ca, caFile: caFile, rec: rec, addr: srv.Listener.Addr().String()}
}

func dial(t *testing.T, cfg credentials.Config) healthpb.HealthClient { return dialB(t, cfg) }

func dialB(t testing.TB, cfg credentials.Config, extra ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	opts, err := cfg.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, extra...)
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(c healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// mintedOnce mints n tokens now and returns them by number. Minted once: a
// token minted again a second later (iat, exp) is another token, so a test
// that compared with a re-minted one failed on a loaded machine crossing a
// second between the two.
func mintedOnce(n int) func(int) string {
	toks := make([]string, n)
	for i := range toks {
		toks[i] = testjwt.Expiring(fmt.Sprintf("caller-%d", i), time.Now().Add(time.Hour))
	}
	return func(i int) string { return toks[i] }
}

func TestGRPCTokenFile(t *testing.T) {
	srv := startGRPC(t)
	fresh := mintedOnce(4)
	td := newTokenDir(t, fresh(1))
	client := dial(t, credentials.Config{Address: srv.addr, TLS: true, CAFile: srv.caFile, ServerName: "localhost", TokenFile: td.path()})

	t.Run("rotation by symlink swap is used on the next call", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			if i > 1 {
				td.swap(fresh(i))
			}
			if err := check(client); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if got, _ := srv.rec.Last(); got != fresh(i) {
				t.Fatalf("call %d: server received %q; want token %d", i, got, i)
			}
		}
	})
	t.Run("an expired JWT never reaches the server", func(t *testing.T) {
		exp := time.Now().Add(-90 * time.Second).Truncate(time.Second)
		td.swap(testjwt.Expiring("stale", exp))
		before := srv.rec.Len()
		err := check(client)
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("err = %v; want Unauthenticated", err)
		}
		for _, want := range []string{td.path(), exp.UTC().Format(time.RFC3339), "expired"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if n := srv.rec.Len(); n != before {
			t.Fatalf("server saw %d calls; want %d (nothing sent)", n, before)
		}
	})
	t.Run("a non-JWT token is sent as is", func(t *testing.T) {
		td.swap("opaque-static-token")
		if err := check(client); err != nil {
			t.Fatal(err)
		}
		if got, _ := srv.rec.Last(); got != "opaque-static-token" {
			t.Fatalf("server received %q", got)
		}
	})
	t.Run("a missing token file fails the call naming the file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		c := dial(t, credentials.Config{Address: srv.addr, TLS: true, CAFile: srv.caFile, TokenFile: missing})
		before := srv.rec.Len()
		err := check(c)
		if err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("err = %v; want it to name %s", err, missing)
		}
		if srv.rec.Len() != before {
			t.Fatal("a call went out without a token")
		}
	})
}

func TestGRPCWrongCAFails(t *testing.T) {
	srv := startGRPC(t)
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := other.WriteCA(filepath.Join(t.TempDir(), "other.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, credentials.Config{Address: srv.addr, TLS: true, CAFile: caFile, Token: "t"})
	if err := check(c); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v; want Unavailable (certificate not trusted)", err)
	}
	if srv.rec.Len() != 0 {
		t.Fatal("server recorded a call")
	}
}

func TestGRPCUnixSocketWithoutTLS(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "c.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder.Recorder{}
	srv := rec.NewGRPCServer(grpc.Creds(local.NewCredentials()))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	c := dial(t, credentials.Config{Address: "unix://" + sock, Token: "socket-token"})
	if err := check(c); err != nil {
		t.Fatal(err)
	}
	if got, _ := rec.Last(); got != "socket-token" {
		t.Fatalf("server received %q", got)
	}
}

// TestGRPCPerRPCRefusesInsecureConnections checks the two guards that stand
// behind Validate: grpc refuses to dial plaintext with the bearer
// credentials, and each call refuses a connection whose security level is
// below privacy and integrity (local credentials over TCP report none).
func TestGRPCPerRPCRefusesInsecureConnections(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder.Recorder{}
	srv := rec.NewGRPCServer(grpc.Creds(local.NewCredentials()))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	perRPC := grpc.WithPerRPCCredentials(credentials.PerRPC(token.Static("secret")))

	t.Run("plaintext dial", func(t *testing.T) {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), perRPC)
		if err == nil {
			_ = conn.Close()
			t.Fatal("dial with bearer credentials over plaintext succeeded")
		}
	})
	t.Run("per-call security level", func(t *testing.T) {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(local.NewCredentials()), perRPC)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		err = check(healthpb.NewHealthClient(conn))
		if err == nil || !strings.Contains(err.Error(), "insecure connection") {
			t.Fatalf("err = %v; want grpc's refusal of secure credentials on an insecure connection", err)
		}
		if rec.Len() != 0 {
			t.Fatal("the token reached the server")
		}
	})
}

// TestPerRPCChecksSecurityLevelItself: the credentials check the security
// level on every call even where grpc has not (no connection information
// at all counts as insecure).
func TestPerRPCChecksSecurityLevelItself(t *testing.T) {
	md, err := credentials.PerRPC(token.Static("secret")).GetRequestMetadata(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refusing to send a bearer token") || md != nil {
		t.Fatalf("GetRequestMetadata() = %v, %v; want a refusal", md, err)
	}
	if !credentials.PerRPC(token.Static("x")).RequireTransportSecurity() {
		t.Fatal("RequireTransportSecurity() = false")
	}
}

func httpClient(t *testing.T, cfg credentials.Config) *http.Client {
	t.Helper()
	rt, err := cfg.Transport()
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: rt}
}

func get(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

func TestHTTPTokenFile(t *testing.T) {
	srv := startHTTPS(t)
	url := "https://" + srv.addr + "/"
	fresh := mintedOnce(4)
	td := newTokenDir(t, fresh(1))
	client := httpClient(t, credentials.Config{TLS: true, CAFile: srv.caFile, TokenFile: td.path()})

	t.Run("rotation by symlink swap is used on the next request", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			if i > 1 {
				td.swap(fresh(i))
			}
			if err := get(client, url); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if got, _ := srv.rec.Last(); got != fresh(i) {
				t.Fatalf("request %d: server received %q", i, got)
			}
		}
	})
	t.Run("an expired JWT never reaches the server", func(t *testing.T) {
		exp := time.Now().Add(-time.Hour).Truncate(time.Second)
		td.swap(testjwt.Expiring("stale", exp))
		before := srv.rec.Len()
		err := get(client, url)
		var ee *token.ExpiredError
		if !errors.As(err, &ee) {
			t.Fatalf("err = %v; want *token.ExpiredError", err)
		}
		if !ee.Expiry.Equal(exp) || !strings.Contains(ee.Source, td.path()) {
			t.Fatalf("ExpiredError = %+v", ee)
		}
		if srv.rec.Len() != before {
			t.Fatal("the expired token reached the server")
		}
	})
	t.Run("a non-JWT token is sent as is", func(t *testing.T) {
		td.swap("opaque-static-token")
		if err := get(client, url); err != nil {
			t.Fatal(err)
		}
		if got, _ := srv.rec.Last(); got != "opaque-static-token" {
			t.Fatalf("server received %q", got)
		}
	})
	t.Run("an http:// URL is refused before the token is read", func(t *testing.T) {
		before := srv.rec.Len()
		err := get(client, "http://"+srv.addr+"/")
		if !errors.Is(err, credentials.ErrPlaintext) {
			t.Fatalf("err = %v; want ErrPlaintext", err)
		}
		if srv.rec.Len() != before {
			t.Fatal("the request reached the server")
		}
	})
}

func TestHTTPUnixSocketWithoutTLS(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder.Recorder{}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })

	client := httpClient(t, credentials.Config{Address: "unix://" + sock, Token: "socket-token"})
	if err := get(client, "http://connector/v1/events"); err != nil {
		t.Fatal(err)
	}
	if got, _ := rec.Last(); got != "socket-token" {
		t.Fatalf("server received %q", got)
	}
}

func TestTLSConfigIsModern(t *testing.T) {
	// A server that only speaks TLS 1.1 must be refused.
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	ca, _ := pki.NewCA("old")
	tc, _ := ca.ServerTLS("127.0.0.1")
	tc.MinVersion, tc.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	srv.TLS = tc
	srv.StartTLS()
	defer srv.Close()
	caFile, _ := ca.WriteCA(filepath.Join(t.TempDir(), "ca.pem"))
	client := httpClient(t, credentials.Config{TLS: true, CAFile: caFile})
	resp, err := client.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("TLS 1.1 accepted")
	}
}

// TestDialValidatesFirst: Dial is DialOptions and grpc.NewClient, so a
// configuration that cannot be honoured (a token over plaintext TCP) is
// refused before any connection exists, naming the keys.
func TestDialValidatesFirst(t *testing.T) {
	cfg, err := credentials.Load("controller", credentials.FromTree(map[string]any{"controller": map[string]any{"address": "127.0.0.1:1", "token": "t"}}))
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := cfg.Dial(); err == nil || conn != nil || !strings.Contains(err.Error(), "controller.tls") {
		t.Fatalf("Dial = %v, %v; want a refusal naming controller.tls", conn, err)
	}
	conn, err := credentials.Config{Address: "127.0.0.1:1"}.Dial()
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
}
