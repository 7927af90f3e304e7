// Command server is a gRPC service behind callerauth: every call's bearer
// token is verified by Kubernetes TokenReview (each verdict cached), and
// the health check is allowed only to the service accounts granted the
// role "reader". The service is gRPC's standard health service, so the
// program needs no generated code.
//
//	server -kubeconfig ~/.kube/config -audience example -reader demo:client \
//	       -cert tls.crt -key tls.key
//
// Without -kubeconfig it uses the pod's in-cluster configuration; its
// service account needs create on tokenreviews.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server that reviews tokens (default: in-cluster)")
	audience := flag.String("audience", "example", "audience a caller's token must be minted for")
	reader := flag.String("reader", "", "service account (namespace:name or namespace:*) granted the role reader")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "its private key (PEM)")
	flag.Parse()
	if err := run(*listen, *kubeconfig, *audience, *reader, *cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run(listen, kubeconfig, audience, reader, cert, key string) error {
	// callerauth: who is calling (TokenReview, verdicts cached) and what
	// they may do (the method's role, granted by service account).
	review, err := kube.New(kube.Config{Kubeconfig: kubeconfig, Audiences: []string{audience}})
	if err != nil {
		return err
	}
	g, err := guard.New(guard.Config{
		Authenticator: authn.NewCache(review.Layer(), authn.CacheConfig{}).Layer(),
		Rule: binding.Roles(binding.RoleConfig{
			Required: map[string]string{"Check": "reader"},
			Grants:   []binding.RoleGrant{{Role: "reader", ServiceAccounts: []string{reader}}},
		}),
	})
	if err != nil {
		return err
	}

	tlsCreds, err := grpccreds.NewServerTLSFromFile(cert, key)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.Creds(tlsCreds),
		grpc.UnaryInterceptor(g.UnaryServerInterceptor(nil)), // callerauth
		grpc.StreamInterceptor(g.StreamServerInterceptor()))  // callerauth
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	fmt.Println("serving on", lis.Addr())
	return srv.Serve(lis)
}
