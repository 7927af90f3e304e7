package chart_test

import (
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

// deployment is what the tests read of a rendered Deployment.
type deployment struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Replicas int `json:"replicas"`
		Template struct {
			Spec struct {
				Containers []struct {
					Args []string `json:"args"`
					Env  []struct {
						Name      string `json:"name"`
						ValueFrom struct {
							SecretKeyRef struct{ Name, Key string } `json:"secretKeyRef"`
						} `json:"valueFrom"`
					} `json:"env"`
					VolumeMounts []struct{ Name, MountPath, SubPath string } `json:"volumeMounts"`
				} `json:"containers"`
				Volumes []struct {
					Name   string `json:"name"`
					Secret struct {
						SecretName string `json:"secretName"`
					} `json:"secret"`
					ConfigMap struct {
						Name string `json:"name"`
					} `json:"configMap"`
				} `json:"volumes"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// findDeployment returns the first Deployment (or StatefulSet: a chart
// with the decision log on) of a rendered template.
func findDeployment(t *testing.T, manifest string) deployment {
	t.Helper()
	for _, doc := range strings.Split(manifest, "\n---") {
		var d deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err == nil && (d.Kind == "Deployment" || d.Kind == "StatefulSet") {
			return d
		}
	}
	t.Fatalf("no Deployment (or StatefulSet) in:\n%s", manifest)
	return deployment{}
}

// flagValue is the value of --name=value among args ("" when absent).
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// checkPostgres: a Deployment rendered for replicas on an external
// PostgreSQL runs that many replicas, gives the service the URL as its
// --datastore, which the service's own datastore parser accepts (with the
// CA where the URL names it), takes the password from the Secret as
// PGPASSWORD, and mounts the CA at caDir.
func checkPostgres(t *testing.T, manifest string, replicas int, url, caDir, secret string) {
	t.Helper()
	d := findDeployment(t, manifest)
	if d.Spec.Replicas != replicas {
		t.Fatalf("%s: %d replicas, want %d", d.Metadata.Name, d.Spec.Replicas, replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	flag := flagValue(c.Args, "datastore")
	if flag != url {
		t.Fatalf("--datastore=%s; want %s", flag, url)
	}
	// pgx reads the CA file when it parses the URL: put one where the pod
	// would have it.
	ca, err := pki.NewCA("postgres")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(filepath.Join(t.TempDir(), "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if dialect, _, err := datastore.Parse(strings.Replace(flag, caDir+"/ca.crt", caFile, 1)); err != nil || dialect != datastore.Postgres {
		t.Fatalf("the service refuses --datastore=%s: %s %v", flag, dialect, err)
	}
	pw := 0
	for _, e := range c.Env {
		if e.Name == "PGPASSWORD" && e.ValueFrom.SecretKeyRef.Name == secret && e.ValueFrom.SecretKeyRef.Key == "password" {
			pw++
		} else if e.ValueFrom.SecretKeyRef.Name != "" {
			t.Fatalf("env %+v: another Secret", c.Env)
		}
	}
	if pw != 1 {
		t.Fatalf("env %+v: no PGPASSWORD from %s", c.Env, secret)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "postgres-ca" && m.MountPath == caDir)
	}
	if !mounted {
		t.Fatalf("the PostgreSQL CA is not mounted at %s: %+v", caDir, c.VolumeMounts)
	}
}

// TestConnectorChartPostgres: deployment-role replicas on an external
// PostgreSQL, and the values that cannot work refused at render.
func TestConnectorChartPostgres(t *testing.T) {
	url := "postgres://connector@db.example:5432/events?sslmode=verify-full&sslrootcert=/etc/platform-connector/postgres-ca/ca.crt"
	base := auth("    enabled: true\n")
	out, err := render(t, "nvsentinel", base+"deployment:\n  enabled: true\n  replicas: 3\n  postgres:\n    url: '"+url+"'\n    passwordSecret: {name: events-db}\n    caConfigMap: events-db-ca\n")
	if err != nil {
		t.Fatal(err)
	}
	checkPostgres(t, out["platform-connector/templates/deployment.yaml"], 3, url, "/etc/platform-connector/postgres-ca", "events-db")
	// One replica on SQLite is the default.
	out, err = render(t, "nvsentinel", base+"deployment: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	if d := findDeployment(t, out["platform-connector/templates/deployment.yaml"]); d.Spec.Replicas != 1 || flagValue(d.Spec.Template.Spec.Containers[0].Args, "datastore") != "/var/lib/platform-connector/events.db" {
		t.Fatalf("default deployment: %+v", d.Spec)
	}
	for _, tt := range []struct{ name, values, want string }{
		{"replicas on SQLite", "deployment: {enabled: true, replicas: 2}\n", "deployment.replicas 2 needs deployment.postgres.url"},
		{"a password in the URL", "deployment: {enabled: true, postgres: {url: 'postgres://c:hunter2@db/events?sslmode=verify-full'}}\n", "carries a password"},
		{"PostgreSQL without TLS", "deployment: {enabled: true, postgres: {url: 'postgres://c@db/events'}}\n", "add sslmode=verify-full"},
		{"another database", "deployment: {enabled: true, postgres: {url: 'mysql://db/events'}}\n", "want a postgres:// URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := render(t, "nvsentinel", base+tt.values); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render = %v; want %q", err, tt.want)
			}
		})
	}
}

// checkURLSecret: a Deployment rendered with the datastore URL from a
// Secret reads it from the Secret's key, mounted as a file, and the URL
// shows in no argument or variable.
func checkURLSecret(t *testing.T, manifest string, replicas int, file, secret string) {
	t.Helper()
	d := findDeployment(t, manifest)
	if d.Spec.Replicas != replicas {
		t.Fatalf("%d replicas, want %d", d.Spec.Replicas, replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if got := flagValue(c.Args, "datastore-url-file"); got != file {
		t.Fatalf("--datastore-url-file=%q; want %q", got, file)
	}
	fromSecret := false
	for _, e := range c.Env {
		fromSecret = fromSecret || e.ValueFrom.SecretKeyRef.Name != ""
	}
	if strings.HasPrefix(flagValue(c.Args, "datastore"), "postgres") || fromSecret {
		t.Fatalf("the URL is in the arguments or the environment: %v %v", c.Args, c.Env)
	}
	dir := filepath.Dir(file)
	var vol string
	for _, m := range c.VolumeMounts {
		if m.MountPath == dir {
			vol = m.Name
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.Secret.SecretName == secret {
			return
		}
	}
	t.Fatalf("no volume of Secret %s mounted at %s", secret, dir)
}

// TestChartsURLSecret: both charts take the whole URL from a Secret.
func TestChartsURLSecret(t *testing.T) {
	out, err := render(t, "nvsentinel", auth("    enabled: true\n")+"deployment:\n  enabled: true\n  replicas: 2\n  postgres:\n    urlSecret: {name: events-db-app}\n")
	if err != nil {
		t.Fatal(err)
	}
	checkURLSecret(t, out["platform-connector/templates/deployment.yaml"], 2, "/etc/platform-connector-datastore-url/uri", "events-db-app")
	out, err = renderVmafx(t, goodVmafx+"controller:\n  replicas: 2\n  postgres:\n    urlSecret: {name: vmafx-db-app, key: dsn}\n")
	if err != nil {
		t.Fatal(err)
	}
	checkURLSecret(t, out["vmafx/templates/controller.yaml"], 2, "/etc/vmafx/datastore-url/dsn", "vmafx-db-app")
	if _, err := render(t, "nvsentinel", auth("    enabled: true\n")+"deployment: {enabled: true, postgres: {url: 'postgres://c@db/e?sslmode=require', urlSecret: {name: x}}}\n"); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Fatalf("url and urlSecret: %v", err)
	}
	if _, err := renderVmafx(t, goodVmafx+"controller: {postgres: {url: 'postgres://c@db/e?sslmode=require', urlSecret: {name: x}}}\n"); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Fatalf("url and urlSecret: %v", err)
	}
}
