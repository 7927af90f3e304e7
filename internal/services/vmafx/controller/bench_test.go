package controller_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	vmafxv1 "github.com/callerauth/callerauth/api/vmafx/v1"
	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/oidc"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
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
	st, err := callers.New(callers.Custom(auth, "OIDC"), callers.Service{Name: "vmafx_controller",
		Rule:     binding.Roles(binding.RoleConfig{Required: controller.MethodRoles, RequireTenant: true}),
		Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(&capture.Buffer{}, nil))})
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

// BenchmarkTenantIsolation measures what tenant a, sending as fast as 32
// callers can, costs tenant b: b's SubmitJob p50 under a's load over its
// p50 alone, reported as p50-ratio (measured, never asserted), for a's
// calls accepted, refused by its rate and refused by its pending quota;
// and for b submitting at a steady 100 a second (b-steady, a tenant's
// ordinary pace) or back to back (b-busy: two busy tenants, each owed its
// share), alone and under a's load alike. docs/reliability.md has a run.
func BenchmarkTenantIsolation(b *testing.B) {
	for _, c := range []struct {
		name string
		tune func(*controller.Options)
	}{
		{"accepted", func(o *controller.Options) {
			o.MaxPendingJobs, o.MaxSubmissionsPerMinute, o.MaxJobsPerTenant = 1000000, 1000000, 10000000
		}},
		{"refused-rate", func(o *controller.Options) {
			o.MaxSubmissionsPerMinute, o.TenantQuotas = 1, []string{"tenant-b=1000000/1000000"}
		}},
		{"refused-pending", func(o *controller.Options) {
			o.MaxPendingJobs, o.MaxSubmissionsPerMinute, o.TenantQuotas = 1, 1000000, []string{"tenant-b=1000000/1000000"}
		}},
	} {
		for _, pace := range []struct {
			name  string
			every time.Duration // between b's submissions; 0: back to back
		}{{"b-steady", 10 * time.Millisecond}, {"b-busy", 0}} {
			b.Run(c.name+"/"+pace.name, func(b *testing.B) {
				e := startOn(b, b.TempDir(), filepath.Join(b.TempDir(), "jobs.db"), c.tune)
				ctx := context.Background()
				ta := e.client(b, "tenant-a", "ci-a", controller.RoleSubmitter)
				tb := e.client(b, "tenant-b", "ci-b", controller.RoleSubmitter)
				p50 := func(n int) time.Duration {
					ds := make([]time.Duration, 0, n)
					var tick <-chan time.Time
					if pace.every > 0 {
						t := time.NewTicker(pace.every)
						defer t.Stop()
						tick = t.C
					}
					for range n {
						if tick != nil {
							<-tick
						}
						start := time.Now()
						if _, err := tb.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec}); err != nil {
							b.Fatal(err)
						}
						ds = append(ds, time.Since(start))
					}
					slices.Sort(ds)
					return ds[len(ds)/2]
				}
				b.ReportAllocs()
				var quiet, loaded time.Duration
				for b.Loop() {
					quiet = p50(100)
					stop := make(chan struct{})
					var wg sync.WaitGroup
					for range 32 {
						wg.Go(func() {
							for {
								select {
								case <-stop:
									return
								default:
									_, _ = ta.SubmitJob(ctx, &vmafxv1.SubmitJobRequest{Spec: spec})
								}
							}
						})
					}
					time.Sleep(200 * time.Millisecond) // a's load under way
					loaded = p50(100)
					close(stop)
					wg.Wait()
				}
				b.ReportMetric(float64(loaded)/float64(quiet), "p50-ratio")
			})
		}
	}
}
