// Command controller-runtime-filter is the example HTTP server's job done
// with controller-runtime's filter instead of callerauth, for
// docs/embedding.md's comparison (its lines of authentication code and
// its size; the test builds it, never runs it: the filter asks the API
// server for a SubjectAccessReview, which the dev issuer does not serve).
// The filter reviews each token (TokenReview, cached a minute) with no
// audience, so a token minted for any service is accepted, and authorizes
// by RBAC (SubjectAccessReview, allow cached 5 minutes).
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server (default: in-cluster)")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "its private key (PEM)")
	flag.Parse()
	if err := run(*listen, *kubeconfig, *cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run(listen, kubeconfig, cert, key string) error {
	// controller-runtime: the filter, on a client of the API server.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, client)
	if err != nil {
		return err
	}
	hello, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello") // the filter hands the handler no caller
	}))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /hello", hello)
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Println("serving on", lis.Addr())
	return srv.ServeTLS(lis, cert, key)
}
