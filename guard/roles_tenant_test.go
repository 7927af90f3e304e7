package guard_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

// A controller with GetJob and DeleteJob; each answers the tenant and user
// the guard handed it, so the test sees what reads would be scoped to.
func controllerMethod(name string) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.ListValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, _ any) (any, error) {
			v, _ := guard.FromContext(ctx)
			if v.Caller == nil { // audit let through a caller with no identity
				return stringsList([]string{"", ""}), nil
			}
			return stringsList([]string{v.Caller.Tenant, v.Caller.Username}), nil
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/vmafx.v1.Controller/" + name}, h)
	}}
}

var controllerDesc = grpc.ServiceDesc{
	ServiceName: "vmafx.v1.Controller",
	HandlerType: (*eventsServer)(nil),
	Methods:     []grpc.MethodDesc{controllerMethod("GetJob"), controllerMethod("DeleteJob")},
}

// TestRolesAndTenant: every call authenticated and role-checked; the caller's
// tenant is handed to the handler. In enforce and in audit.
func TestRolesAndTenant(t *testing.T) {
	for _, mode := range []guard.Mode{guard.Enforce, guard.Audit} {
		t.Run(string(mode), func(t *testing.T) { testRolesAndTenant(t, mode) })
	}
}

func testRolesAndTenant(t *testing.T, mode guard.Mode) {
	callers := map[string]*authn.Caller{
		"reader-a":  {Username: "system:serviceaccount:vmafx:operator", Tenant: "tenant-a", Roles: []string{"vmafx:reader"}},
		"reader-b":  {Username: "alice", Tenant: "tenant-b", Roles: []string{"vmafx:reader", "vmafx:writer"}},
		"no-role":   {Username: "bob", Tenant: "tenant-a", Roles: []string{"vmafx:viewer"}},
		"no-tenant": {Username: "carol", Roles: []string{"vmafx:reader"}},
	}
	g, reg := newGuard(t, guard.Config{Mode: mode, Authenticator: fakeAuth(callers), Rule: binding.Roles(binding.RoleConfig{
		Required: map[string]string{"GetJob": "vmafx:reader"}, RequireTenant: true})})
	ca, _ := pki.NewCA("roles and tenant")
	tc, _ := ca.ServerTLS(pki.LoopbackHosts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(grpccreds.NewTLS(tc)), grpc.ChainUnaryInterceptor(g.UnaryServerInterceptor(nil)))
	srv.RegisterService(&controllerDesc, nil)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(grpccreds.NewClientTLSFromCert(ca.Pool(), "localhost")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rows := []struct {
		name, token, method string
		code                codes.Code
		reason              string
		tenant              string
	}{
		{"a reader's GetJob is scoped to its tenant", "reader-a", "GetJob", codes.OK, "", "tenant-a"},
		{"another tenant's reader sees its own tenant", "reader-b", "GetJob", codes.OK, "", "tenant-b"},
		{"a caller lacking vmafx:reader is refused", "no-role", "GetJob", codes.PermissionDenied, "role_missing", "tenant-a"},
		{"a method no role grants is refused", "reader-b", "DeleteJob", codes.PermissionDenied, "role_missing", "tenant-b"},
		{"a caller with no tenant cannot be scoped", "no-tenant", "GetJob", codes.PermissionDenied, "tenant_missing", ""},
		{"every call is authenticated: no token", "", "GetJob", codes.Unauthenticated, "token_missing", ""},
		{"an invalid token", "invalid", "GetJob", codes.Unauthenticated, "token_invalid", ""},
	}
	for _, r := range rows {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if r.token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.token)
		}
		before := counters(t, reg)
		out := new(structpb.ListValue)
		err := conn.Invoke(ctx, "/vmafx.v1.Controller/"+r.method, &structpb.ListValue{}, out)
		cancel()
		st := status.Convert(err)
		wantCode := r.code
		if mode == guard.Audit {
			wantCode = codes.OK // audit lets it through, counted
		}
		if st.Code() != wantCode || (err != nil && st.Message() != r.reason) {
			t.Errorf("%s: %v; want %s %s", r.name, err, wantCode, r.reason)
			continue
		}
		if err == nil && nodesOf(out)[0] != r.tenant {
			t.Errorf("%s: handler saw tenant %q; want %q", r.name, nodesOf(out)[0], r.tenant)
		}
		d := deltas(before, counters(t, reg))
		if r.reason != "" && d["platform_connector_auth_violations_total{"+r.reason+"}"] != 1 || r.reason == "" && len(d) != 0 {
			t.Errorf("%s: counter deltas %v", r.name, d)
		}
	}
}
