package chart_test

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/authn/authconfig"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/services/refresher"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
	"github.com/callerauth/callerauth/internal/services/vmafx/node"
)

const vmafxChart = "../../deploy/charts/vmafx"

func renderVmafx(t *testing.T, values string) (map[string]string, error) {
	return renderChart(t, vmafxChart, "vmafx", "vmafx-system", values)
}

const goodVmafx = `tenants:
  - name: tenant-a
    issuer: https://idp.tenant-a.example/
    audiences: [vmafx-controller]
  - name: tenant-b
    issuer: https://idp.tenant-b.example/
    audiences: [vmafx-controller]
    rolesClaim: roles
    tenantClaim: tenant
credentials:
  tenant: tenant-a
`

// configMapFile extracts one file of a rendered ConfigMap.
func configMapFile(t *testing.T, out map[string]string, template, name, key string) string {
	t.Helper()
	for _, doc := range strings.Split(out["vmafx/templates/"+template], "\n---") {
		var cm struct {
			Kind     string                `json:"kind"`
			Metadata struct{ Name string } `json:"metadata"`
			Data     map[string]string     `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err == nil && cm.Kind == "ConfigMap" && cm.Metadata.Name == name {
			return cm.Data[key]
		}
	}
	t.Fatalf("no ConfigMap %s in %s", name, template)
	return ""
}

// TestVmafxChartFeedsTheBinaries: the rendered tenants file is accepted by
// the controller's loader, and the node's and operator's connection by the
// credentials loader they use, for both credential modes.
func TestVmafxChartFeedsTheBinaries(t *testing.T) {
	for _, mode := range []string{"secret", "refresher"} {
		t.Run(mode, func(t *testing.T) {
			values := goodVmafx + "  mode: " + mode + "\n  refresher:\n    tokenURL: https://idp.tenant-a.example/oauth2/token\n"
			out, err := renderVmafx(t, values)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			authnFile := filepath.Join(dir, "authentication-config.yaml")
			_ = os.WriteFile(authnFile, []byte(configMapFile(t, out, "controller.yaml", "vmafx-controller-authn", "authentication-config.yaml")), 0o600)
			checkAuthnConfig(t, authnFile)
			if cmd := controller.NewCommand(io.Discard); cmd.ParseFlags(deploymentOf(t, out["vmafx/templates/controller.yaml"]).Spec.Template.Spec.Containers[0].Args) != nil {
				t.Fatal("vmafx-controller refuses the chart's arguments")
			}
			// The controller's CA as the pods see it: the Secret's ca.crt
			// mounted where the rendered connection says.
			ca, err := pki.NewCA("chart test")
			if err != nil {
				t.Fatal(err)
			}
			caFile, err := ca.WriteCA(filepath.Join(dir, "ca.crt"))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ template, name, key string }{{"node.yaml", "vmafx-node", "node.yaml"}, {"operator.yaml", "vmafx-operator", "operator.yaml"}} {
				p := filepath.Join(dir, c.key)
				conn := configMapFile(t, out, c.template, c.name, c.key)
				if !strings.Contains(conn, "ca_file: /etc/vmafx/controller-ca/ca.crt") {
					t.Fatalf("%s: the connection does not use the mounted CA:\n%s", c.key, conn)
				}
				_ = os.WriteFile(p, []byte(strings.Replace(conn, "/etc/vmafx/controller-ca/ca.crt", caFile, 1)), 0o600)
				o := node.NewOptions("")
				o.Config, o.LookupEnv = p, func(string) (string, bool) { return "", false }
				completed, err := o.Complete()
				cfg := completed.Controller
				if err != nil {
					t.Fatalf("%s: the credentials loader refuses the chart's connection: %v", c.key, err)
				}
				if !cfg.TLS || cfg.TokenFile != "/var/run/vmafx/token/token" || !strings.HasSuffix(cfg.Address, ".svc.cluster.local.:8443") {
					t.Fatalf("%s: %+v", c.key, cfg)
				}
			}
			// The node mounts only its tenant's directory of the clip volume,
			// and its rendered arguments are ones vmafx-node accepts.
			ds := daemonSet(t, out["vmafx/templates/node.yaml"])
			node0 := ds.Spec.Template.Spec.Containers[0]
			var mounted, host string
			for _, m := range node0.VolumeMounts {
				if m.Name == "clips" {
					mounted = m.MountPath
				}
			}
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.Name == "clips" && v.HostPath != nil {
					host = v.HostPath.Path
				}
			}
			if mounted != "/var/lib/vmafx/clips/tenant-a" || host != "/var/lib/vmafx/clips/tenant-a" {
				t.Fatalf("clips: host path %q mounted at %q; want the tenant's directory only", host, mounted)
			}
			cmd := node.NewCommand(io.Discard)
			if err := cmd.ParseFlags(node0.Args); err != nil {
				t.Fatalf("vmafx-node refuses the chart's arguments %v: %v", node0.Args, err)
			}
			if v, _ := cmd.Flags().GetString("clip-root"); v != "/var/lib/vmafx/clips" {
				t.Fatalf("--clip-root %q", v)
			}
			hasSidecar := strings.Contains(out["vmafx/templates/node.yaml"], "token-refresher") && strings.Contains(out["vmafx/templates/operator.yaml"], "token-refresher")
			if hasSidecar != (mode == "refresher") {
				t.Fatalf("refresher sidecars rendered: %v in mode %s", hasSidecar, mode)
			}
			for _, c := range ds.Spec.Template.Spec.Containers {
				if c.Name != "token-refresher" {
					continue
				}
				// The sidecar is the refresher's own image, and its
				// arguments pass the refresher's flag parsing.
				if !strings.HasSuffix(c.Image, "/callerauth-refresher:"+strings.TrimSpace(string(mustReadFile(t, "../../VERSION")))) {
					t.Fatalf("token-refresher image %s; want callerauth-refresher", c.Image)
				}
				o := refresher.NewOptions()
				fs := pflag.NewFlagSet("callerauth-refresher", pflag.ContinueOnError)
				o.AddFlags(fs)
				if err := fs.Parse(c.Args); err != nil {
					t.Fatalf("callerauth-refresher refuses the chart's arguments %v: %v", c.Args, err)
				}
				if o.Out != "/var/run/vmafx/token/token" || o.TokenURL != "https://idp.tenant-a.example/oauth2/token" || o.Audience != "vmafx-controller" {
					t.Fatalf("the refresher's options from the chart: %+v", o)
				}
			}
		})
	}
}

// checkAuthnConfig loads the chart's AuthenticationConfiguration as the
// controller does — decoded, validated and its CEL compiled as the API
// server does, one constant tenant per issuer — and checks each issuer's
// tenant.
func checkAuthnConfig(t *testing.T, file string) {
	t.Helper()
	cfg, err := authconfig.Load(file)
	if err != nil {
		t.Fatalf("the controller refuses the chart's AuthenticationConfiguration: %v", err)
	}
	if err := controller.CheckTenantPerIssuer(cfg); err != nil {
		t.Fatalf("the controller refuses the chart's issuers: %v", err)
	}
	if len(cfg.Issuers) != 2 {
		t.Fatalf("%d issuers", len(cfg.Issuers))
	}
	for i, want := range []string{"tenant-a", "tenant-b"} {
		if got, _ := authconfig.ConstantExtra(cfg.Issuers[i], authconfig.ExtraTenant); got != want {
			t.Fatalf("issuer %d: tenant %q; want %q", i, got, want)
		}
	}
}

// TestVmafxChartTakesAWholeConfiguration: authenticationConfig is passed
// to the controller as it is.
func TestVmafxChartTakesAWholeConfiguration(t *testing.T) {
	whole := "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n" +
		"- issuer: {url: 'https://idp.tenant-a.example/', audiences: [vmafx-controller]}\n  claimMappings:\n    username: {expression: 'claims.sub'}\n    extra:\n    - {key: callerauth.dev/tenant, valueExpression: '\"tenant-a\"'}\n" +
		"- issuer: {url: 'https://idp.tenant-b.example/', audiences: [vmafx-controller]}\n  claimMappings:\n    username: {expression: 'claims.sub'}\n    extra:\n    - {key: callerauth.dev/tenant, valueExpression: '\"tenant-b\"'}\n"
	values := "authenticationConfig: |\n" + block(whole, 2) + "\ncredentials:\n  tenant: tenant-a\n"
	out, err := renderVmafx(t, values)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "authentication-config.yaml")
	got := configMapFile(t, out, "controller.yaml", "vmafx-controller-authn", "authentication-config.yaml")
	if strings.TrimSpace(got) != strings.TrimSpace(whole) {
		t.Fatalf("rendered:\n%s\nwant:\n%s", got, whole)
	}
	_ = os.WriteFile(file, []byte(got), 0o600)
	checkAuthnConfig(t, file)
}

// block indents every line of s by n spaces (a YAML block scalar).
func block(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
}

// deploymentOf is the Deployment of a rendered template.
func deploymentOf(t *testing.T, rendered string) *appsv1.Deployment {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err == nil && d.Kind == "Deployment" {
			return &d
		}
	}
	t.Fatal("no Deployment rendered")
	return nil
}

// daemonSet is the DaemonSet of a rendered template.
func daemonSet(t *testing.T, rendered string) *appsv1.DaemonSet {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---") {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err == nil && ds.Kind == "DaemonSet" {
			return &ds
		}
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}

func TestVmafxChartRefusals(t *testing.T) {
	for _, tt := range []struct{ name, values, want string }{
		{"no tenants", "credentials: {tenant: a}\n", "at least one tenant is required"},
		{"a tenant without issuer", "tenants: [{name: a, audiences: [x]}]\ncredentials: {tenant: a}\n", "tenants[0] (a): issuer is required"},
		{"a plain-HTTP issuer", "tenants: [{name: a, issuer: 'http://idp', audiences: [x]}]\ncredentials: {tenant: a}\n", `issuer "http://idp" must be https://`},
		{"a tenant without audiences", "tenants: [{name: a, issuer: 'https://idp'}]\ncredentials: {tenant: a}\n", "audiences: at least one is required"},
		{"a bad tenant name", "tenants: [{name: Tenant_A, issuer: 'https://idp', audiences: [x]}]\ncredentials: {tenant: a}\n", "want a DNS label"},
		{"TLS off with a token", goodVmafx + "controller: {tls: {enabled: false}}\n", "a token never travels over plaintext TCP"},
		{"no credentials tenant", strings.Replace(goodVmafx, "  tenant: tenant-a\n", "  tenant: \"\"\n", 1), "credentials.tenant is required"},
		{"refresher without a token URL", goodVmafx + "  mode: refresher\n", "tokenURL must be the tenant IdP's https:// token endpoint"},
		{"refresher renewing past the lifetime", goodVmafx + "  mode: refresher\n  refresher: {tokenURL: 'https://idp/oauth2/token', renewAt: 1.5}\n", "renewAt 1.5: want a fraction"},
		{"an unknown mode", goodVmafx + "  mode: vault\n", `credentials.mode "vault"`},
		{"replicas on SQLite", goodVmafx + "controller: {replicas: 2}\n", "controller.replicas 2 needs controller.postgres.url"},
		{"a password in the URL", goodVmafx + "controller: {postgres: {url: 'postgres://vmafx:hunter2@db:5432/vmafx?sslmode=verify-full'}}\n", "carries a password"},
		{"PostgreSQL without TLS", goodVmafx + "controller: {postgres: {url: 'postgres://vmafx@db:5432/vmafx'}}\n", "add sslmode=verify-full"},
		{"PostgreSQL with TLS that may fall back", goodVmafx + "controller: {postgres: {url: 'postgres://vmafx@db:5432/vmafx?sslmode=prefer'}}\n", "add sslmode=verify-full"},
		{"another database", goodVmafx + "controller: {postgres: {url: 'mysql://db/vmafx'}}\n", "want a postgres:// URL"},
		{"a CA from a ConfigMap", "tenants: [{name: a, issuer: 'https://idp', audiences: [x], caConfigMap: idp-ca}]\ncredentials: {tenant: a}\n", "caConfigMap is gone: give the issuer's CA as PEM in certificateAuthority"},
		{"a dotted roles claim", "tenants: [{name: a, issuer: 'https://idp', audiences: [x], rolesClaim: realm_access.roles}]\ncredentials: {tenant: a}\n", `rolesClaim "realm_access.roles": a plain claim name here`},
		{"both tenants and a whole configuration", goodVmafx + "authenticationConfig: 'kind: AuthenticationConfiguration'\n", "authenticationConfig and tenants: give one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := renderVmafx(t, tt.values); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestVmafxChartPostgres: replicas on an external PostgreSQL (see
// checkPostgres).
func TestVmafxChartPostgres(t *testing.T) {
	url := "postgres://vmafx@db.example:5432/vmafx?sslmode=verify-full&sslrootcert=/etc/vmafx/postgres-ca/ca.crt"
	out, err := renderVmafx(t, goodVmafx+"controller:\n  replicas: 3\n  postgres:\n    url: '"+url+"'\n    passwordSecret: {name: vmafx-db}\n    caConfigMap: vmafx-db-ca\n")
	if err != nil {
		t.Fatal(err)
	}
	checkPostgres(t, out["vmafx/templates/controller.yaml"], 3, url, "/etc/vmafx/postgres-ca", "vmafx-db")
}

// TestVmafxChartCRDIsTheGeneratedOne: the chart ships the CRD controller-gen
// made (deploy/crds).
func TestVmafxChartCRDIsTheGeneratedOne(t *testing.T) {
	a, err := os.ReadFile(filepath.Join(vmafxChart, "crds", "vmafx.callerauth.dev_vmafxjobs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../deploy/crds/vmafx.callerauth.dev_vmafxjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("deploy/charts/vmafx/crds differs from deploy/crds: make generate copies it")
	}
}

// TestVmafxChartQuotas: controller.quotas reach the controller's flags —
// the defaults, and a tenant's override as --tenant-quota — and the
// controller takes them.
func TestVmafxChartQuotas(t *testing.T) {
	out, err := renderVmafx(t, goodVmafx+"controller:\n  quotas:\n    maxPendingJobs: 200\n    tenants: [{tenant: tenant-a, maxPendingJobs: 5000, maxSubmissionsPerMinute: 1200}]\n")
	if err != nil {
		t.Fatal(err)
	}
	args := deploymentOf(t, out["vmafx/templates/controller.yaml"]).Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--max-pending-jobs=200", "--max-submissions-per-minute=600", "--tenant-quota=tenant-a=5000/1200"} {
		if !slices.Contains(args, want) {
			t.Errorf("the controller's arguments lack %s: %q", want, args)
		}
	}
	if cmd := controller.NewCommand(io.Discard); cmd.ParseFlags(args) != nil {
		t.Fatal("vmafx-controller refuses the chart's arguments")
	}
}

// splitNodes are the values of docs/deploy.md's node release: the node
// alone, calling the controller of release cp in namespace vmafx-cp.
const splitNodes = "credentials: {tenant: tenant-a}\ncontroller: {enabled: false, address: 'cp-vmafx-controller.vmafx-cp.svc.cluster.local.:8443'}\noperator: {enabled: false}\n"

// TestVmafxSplitAndReleases: docs/deploy.md's split renders — a release
// of the node alone calls the other release's controller, whose
// NetworkPolicy admits it from its namespace — and two releases in one
// namespace share no object's name.
func TestVmafxSplitAndReleases(t *testing.T) {
	nodes, err := renderChart(t, vmafxChart, "nodes", "vmafx-nodes", splitNodes)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(nodes["vmafx/templates/controller.yaml"]) != "" || strings.TrimSpace(nodes["vmafx/templates/operator.yaml"]) != "" {
		t.Errorf("a node release renders a controller or an operator:\n%s%s", nodes["vmafx/templates/controller.yaml"], nodes["vmafx/templates/operator.yaml"])
	}
	conn := configMapFile(t, nodes, "node.yaml", "nodes-vmafx-node", "node.yaml")
	if !strings.Contains(conn, "address: cp-vmafx-controller.vmafx-cp.svc.cluster.local.:8443") || !strings.Contains(conn, "server_name: cp-vmafx-controller.vmafx-cp.svc") {
		t.Errorf("the node release's connection:\n%s", conn)
	}
	cp, err := renderChart(t, vmafxChart, "cp", "vmafx-cp", goodVmafx+"node: {enabled: false}\ncontroller: {nodeNamespaces: [vmafx-nodes]}\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cp["vmafx/templates/controller.yaml"], "kubernetes.io/metadata.name: vmafx-nodes") {
		t.Errorf("the controller's NetworkPolicy does not admit the nodes' namespace:\n%s", cp["vmafx/templates/controller.yaml"])
	}
	if _, err := renderChart(t, vmafxChart, "nodes", "vmafx-nodes", "credentials: {tenant: tenant-a}\ncontroller: {enabled: false}\n"); err == nil || !strings.Contains(err.Error(), "controller.address") {
		t.Errorf("no controller and no address: %v; want a refusal naming controller.address", err)
	}
	// Two releases in one namespace.
	names := map[string]string{}
	for _, rel := range []string{"vmafx", "vmafx-b", "team-c"} {
		out, err := renderChart(t, vmafxChart, rel, "shared", goodVmafx)
		if err != nil {
			t.Fatal(err)
		}
		for file, body := range out {
			for doc := range strings.SplitSeq(body, "\n---") {
				var o struct {
					Kind     string
					Metadata struct{ Name string }
				}
				if yaml.Unmarshal([]byte(doc), &o) != nil || o.Kind == "" {
					continue
				}
				key := o.Kind + "/" + o.Metadata.Name
				if prev, dup := names[key]; dup {
					t.Errorf("%s of release %s (%s) is also release %s's", key, rel, file, prev)
				}
				names[key] = rel
			}
		}
	}
}
