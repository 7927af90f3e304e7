// Command client calls the example gRPC server's health check with the
// bearer token in a file (a projected service-account token, which the
// kubelet renews), read again on every call, over TLS. It prints the
// outcome: "accepted SERVING", or "refused <reason>" with the reason
// callerauth gave. With -expect it exits 1 unless the outcome is that.
//
//	client -address 127.0.0.1:8443 -ca ca.crt -token-file token -expect accepted
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/callerauth/callerauth/credentials"
)

func main() {
	address := flag.String("address", "", "the server, host:port")
	ca := flag.String("ca", "", "CA bundle (PEM) the server's certificate is checked against")
	tokenFile := flag.String("token-file", "", "file holding the bearer token")
	expect := flag.String("expect", "", `exit 1 unless the outcome starts with this ("accepted", "refused role_missing")`)
	flag.Parse()
	outcome, err := call(*address, *ca, *tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	fmt.Println(outcome)
	if *expect != "" && !strings.HasPrefix(outcome, *expect) {
		fmt.Fprintf(os.Stderr, "client: expected %q\n", *expect)
		os.Exit(1)
	}
}

func call(address, ca, tokenFile string) (string, error) {
	// callerauth: TLS and the token file, read on every call.
	conn, err := credentials.Config{Address: address, TLS: true, CAFile: ca, TokenFile: tokenFile}.Dial()
	if err != nil {
		return "", err
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		return "accepted " + resp.GetStatus().String(), nil
	}
	// A refusal carries its reason in an ErrorInfo detail.
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return "refused " + info.GetReason(), nil
		}
	}
	return "", err
}
