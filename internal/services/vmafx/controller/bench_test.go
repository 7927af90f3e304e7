package controller_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/authn/stack"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/devissuer/devissuertest"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/capture"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
	"github.com/callerauth/callerauth/token"

	"log/slog"
)

// BenchmarkGetJob is one GetJob over TLS on loopback, side by side: with
// the controller's authentication (offline verification against the
// tenant's IdP, a cached verdict after the first call, the role rule) and
// with authentication disabled (a fixed caller put in the context). The
// difference is what a caller pays for being checked.
func BenchmarkGetJob(b *testing.B) {
	iss, srv := devissuertest.Serve(b, devissuer.Config{Issuer: "https://idp.tenant-a.example"})
	auth, err := oidc.New(oidc.Config{Issuers: []oidc.IssuerConfig{{Issuer: iss.Issuer(), DiscoveryURL: srv.URL, CAFile: iss.CAFile(),
		Audiences: []string{"vmafx-controller"}, Tenant: "tenant-a", RolesClaim: "scp"}}})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := iss.MintIdentity(devissuer.IdentityRequest{Subject: "dash", Audiences: []string{"vmafx-controller"}, Claims: map[string]any{"scp": controller.RoleReader}})
	if err != nil {
		b.Fatal(err)
	}
	store, err := controller.OpenStore(filepath.Join(b.TempDir(), "jobs.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	job, err := store.Submit(context.Background(), "tenant-a", "ci", "", &vmafxv1.JobSpec{Reference: "/r.y4m", Distorted: "/d.y4m", Metrics: []string{"psnr"}}, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	st, err := stack.Build(stack.Custom(auth, "OIDC"), stack.Spec{Mode: guard.Enforce,
		Rule:     binding.Roles(binding.RoleConfig{Required: controller.MethodRoles, RequireTenant: true}),
		Registry: prometheus.NewRegistry(), MetricsPrefix: "vmafx_controller", Logger: slog.New(slog.NewTextHandler(&capture.Buffer{}, nil))})
	if err != nil {
		b.Fatal(err)
	}
	g := st.Guard
	fixed := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(guard.NewContext(ctx, &guard.Verdict{Allowed: true, Caller: &authn.Caller{Username: "dash", Tenant: "tenant-a"}}), req)
	}
	ca, _ := pki.NewCA("bench")
	tlsCfg, _ := ca.ServerTLS("127.0.0.1")
	for _, c := range []struct {
		name string
		icpt grpc.UnaryServerInterceptor
	}{{"auth-cached", g.UnaryServerInterceptor(nil)}, {"auth-disabled", fixed}} {
		b.Run(c.name, func(b *testing.B) {
			lis, _ := net.Listen("tcp", "127.0.0.1:0")
			s := grpc.NewServer(grpc.Creds(grpccreds.NewTLS(tlsCfg)), grpc.ChainUnaryInterceptor(c.icpt))
			vmafxv1.RegisterJobServiceServer(s, &controller.Service{Store: store, Lease: time.Minute})
			go func() { _ = s.Serve(lis) }()
			defer s.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})),
				grpc.WithPerRPCCredentials(credentials.PerRPC(token.Static(tok.Token))))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := vmafxv1.NewJobServiceClient(conn)
			req := &vmafxv1.GetJobRequest{Id: job.GetId()}
			if _, err := client.GetJob(context.Background(), req); err != nil { // warms the verdict cache
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := client.GetJob(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
