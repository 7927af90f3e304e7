// Command server is an HTTP service behind callerauth: every request's
// bearer token is verified offline against its issuer's published keys
// (OIDC discovery and JWKS: no call per token), and GET /hello is allowed
// only to the service accounts granted the role "reader".
//
//	server -issuer https://kubernetes.default.svc.cluster.local \
//	       -discovery-url https://api.example:6443 -issuer-ca ca.crt \
//	       -audience example -reader demo:client -cert tls.crt -key tls.key
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	issuer := flag.String("issuer", "", "the iss of the tokens accepted (https://)")
	discovery := flag.String("discovery-url", "", "where the issuer's /.well-known/openid-configuration is served (default: the issuer)")
	issuerCA := flag.String("issuer-ca", "", "CA bundle (PEM) for the discovery and key fetches (default: the system roots)")
	audience := flag.String("audience", "example", "audience a caller's token must be minted for")
	reader := flag.String("reader", "", "service account (namespace:name or namespace:*) granted the role reader")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "its private key (PEM)")
	flag.Parse()
	if err := run(*listen, *issuer, *discovery, *issuerCA, *audience, *reader, *cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run(listen, issuer, discovery, issuerCA, audience, reader, cert, key string) error {
	// callerauth: who is calling (the issuer's keys, verdicts cached) and
	// what they may do (the route's role, granted by service account).
	verify, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{{
		Issuer: issuer, DiscoveryURL: discovery, CAFile: issuerCA, Audiences: []string{audience}}}})
	if err != nil {
		return err
	}
	g, err := guard.New(guard.Config{
		Authenticator: authn.NewCache(verify.Layer(), authn.CacheConfig{}).Layer(),
		Rule: binding.Roles(binding.RoleConfig{
			Required: map[string]string{"GET /hello": "reader"},
			Grants:   []binding.RoleGrant{{Role: "reader", ServiceAccounts: []string{reader}}},
		}),
	})
	if err != nil {
		return err
	}

	protect := g.Middleware(nil, guard.RequireIdentity()) // callerauth
	mux := http.NewServeMux()
	mux.Handle("GET /hello", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := guard.FromContext(r.Context()) // the verified caller
		fmt.Fprintln(w, "hello", v.Caller.Username)
	})))
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Println("serving on", lis.Addr())
	if err := srv.ServeTLS(lis, cert, key); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
