package chart_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/services/pdp"
)

const pdpChart = "../../deploy/charts/pdp"

func renderPDP(t *testing.T, values string) (map[string]string, error) {
	return renderChart(t, pdpChart, "flex-auth", "flex-auth", values)
}

// examplePDPValues are values serving examples/secrets-engine, its policy
// and registry inline, as YAML after edit (when set) changed them.
func examplePDPValues(t *testing.T, edit ...func(v map[string]any)) string {
	t.Helper()
	files := map[string]string{}
	dir := "../../examples/secrets-engine/policy"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		files[e.Name()] = string(mustReadFile(t, filepath.Join(dir, e.Name())))
	}
	v := map[string]any{
		"tls":        map[string]any{"secretName": "flex-auth-tls"},
		"signingKey": map[string]any{"secretName": "flex-auth-signing"},
		"policy":     map[string]any{"files": files},
		"registry":   map[string]any{"json": string(mustReadFile(t, "../../examples/secrets-engine/registry.json"))},
		"caller": map[string]any{
			"bindings": map[string]any{"secrets-engine": "system:serviceaccount:secrets-engine:secrets-engine"},
			"issuers":  []string{"https://kubernetes.default.svc.cluster.local"},
		},
	}
	for _, e := range edit {
		e(v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// set returns an edit that sets v[path...] = value.
func set(value any, path ...string) func(map[string]any) {
	return func(v map[string]any) {
		for _, k := range path[:len(path)-1] {
			next, ok := v[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				v[k] = next
			}
			v = next
		}
		v[path[len(path)-1]] = value
	}
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// manifests splits every rendered template into objects, by kind/name.
func manifests(t *testing.T, out map[string]string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, text := range out {
		for _, doc := range strings.Split(text, "\n---") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil || o == nil {
				continue
			}
			md, _ := o["metadata"].(map[string]any)
			objs[o["kind"].(string)+"/"+md["name"].(string)] = o
		}
	}
	return objs
}

// TestPDPChartFeedsThePDP renders the chart for the example policy and
// hands the result to the pdp itself: the rendered command line passes the
// pdp's flag parsing and validation, and, with the rendered ConfigMaps'
// files, a signing key and a serving pair where the pod would mount them,
// the pdp loads the policy, the registry and the key.
func TestPDPChartFeedsThePDP(t *testing.T) {
	out, err := renderPDP(t, examplePDPValues(t))
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, out)
	d := findDeployment(t, out["pdp/templates/deployment.yaml"])
	if d.Spec.Replicas != 2 {
		t.Fatalf("replicas %d", d.Spec.Replicas)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	o, err := pdp.ParseArgs(args)
	if err != nil {
		t.Fatalf("the pdp refuses the rendered flags: %v\n%s", err, strings.Join(args, "\n"))
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the pdp's validation refuses the rendered flags: %v\n%s", err, strings.Join(args, "\n"))
	}
	if o.AuthZENBaseURL != "https://flex-auth-pdp.flex-auth.svc.cluster.local.:8443" || len(o.CallerBindings) != 1 || o.Callers.Mode != "enforce" {
		t.Fatalf("options %+v", o)
	}
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.SubPath != "" {
			t.Fatalf("a subPath mount never sees an updated ConfigMap or Secret: %+v", m)
		}
	}

	// The files where the pod would have them.
	root := t.TempDir()
	remap := func(p string) string { return strings.Replace(p, "/etc/pdp", root, 1) }
	for dir, cm := range map[string]string{"policy": "ConfigMap/flex-auth-pdp-policy", "registry": "ConfigMap/flex-auth-pdp-registry"} {
		data, _ := objs[cm]["data"].(map[string]any)
		if len(data) == 0 {
			t.Fatalf("no %s rendered", cm)
		}
		if err := os.MkdirAll(filepath.Join(root, dir), 0o700); err != nil {
			t.Fatal(err)
		}
		for name, content := range data {
			if err := os.WriteFile(filepath.Join(root, dir, name), []byte(content.(string)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = os.MkdirAll(filepath.Join(root, "signing"), 0o700)
	_ = os.MkdirAll(filepath.Join(root, "tls"), 0o700)
	if err := decision.GenerateKeyFile(remap(o.SigningKeyFile)); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("pdp chart")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("flex-auth-pdp.flex-auth.svc", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(remap(o.Serve.TLSCertFile), certPEM, 0o600)
	_ = os.WriteFile(remap(o.Serve.TLSKeyFile), keyPEM, 0o600)
	o.PolicyDir, o.Registry, o.SigningKeyFile = remap(o.PolicyDir), remap(o.Registry), remap(o.SigningKeyFile)
	o.Serve.TLSCertFile, o.Serve.TLSKeyFile = remap(o.Serve.TLSCertFile), remap(o.Serve.TLSKeyFile)
	o.Serve.Listen, o.Serve.MetricsListen = "127.0.0.1:0", "127.0.0.1:0"
	c, err := o.Complete()
	if err != nil {
		t.Fatalf("the pdp refuses what the chart renders: %v", err)
	}
	// No API server here: the caller backend is the one thing replaced.
	c.Callers = callers.Custom(authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) {
		return &authn.Caller{Username: "system:serviceaccount:secrets-engine:secrets-engine", Expiry: time.Now().Add(time.Hour)}, nil
	}), "TokenReview")
	if _, err := pdp.New(c); err != nil {
		t.Fatalf("the pdp refuses what the chart renders: %v", err)
	}

	// TokenReview: the Deployment's ServiceAccount is bound to a
	// ClusterRole of its own that may create tokenreviews and nothing else
	// (not system:auth-delegator, which adds SubjectAccessReview).
	crb := objs["ClusterRoleBinding/flex-auth-pdp-flex-auth-tokenreview"]
	if crb == nil || crb["roleRef"].(map[string]any)["name"] != "flex-auth-pdp-flex-auth-tokenreview" {
		t.Fatalf("no tokenreview binding: %v", crb)
	}
	role := objs["ClusterRole/flex-auth-pdp-flex-auth-tokenreview"]
	if got := fmt.Sprint(role["rules"]); got != "[map[apiGroups:[authentication.k8s.io] resources:[tokenreviews] verbs:[create]]]" {
		t.Fatalf("the TokenReview ClusterRole grants %s", got)
	}
	if sa := crb["subjects"].([]any)[0].(map[string]any)["name"]; sa != "flex-auth-pdp" {
		t.Fatalf("the binding names %v", sa)
	}
	// The Service is published as its trailing-dot FQDN.
	svc := objs["Service/flex-auth-pdp"]
	if fqdn := svc["metadata"].(map[string]any)["annotations"].(map[string]any)["callerauth.dev/fqdn"]; fqdn != "flex-auth-pdp.flex-auth.svc.cluster.local." {
		t.Fatalf("fqdn %v", fqdn)
	}
	if !strings.Contains(out["pdp/templates/NOTES.txt"], "https://flex-auth-pdp.flex-auth.svc.cluster.local.:8443/v1/check") {
		t.Fatalf("NOTES:\n%s", out["pdp/templates/NOTES.txt"])
	}
	if objs["PodDisruptionBudget/flex-auth-pdp"] == nil || objs["HorizontalPodAutoscaler/flex-auth-pdp"] != nil {
		t.Fatal("by default: a PodDisruptionBudget, no autoscaler")
	}
}

// TestPDPChartAutoscaling: with the autoscaler on, it owns the replica
// count.
func TestPDPChartAutoscaling(t *testing.T) {
	out, err := renderPDP(t, examplePDPValues(t, set(map[string]any{"enabled": true, "minReplicas": 3, "maxReplicas": 9}, "autoscaling")))
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, out)
	hpa := objs["HorizontalPodAutoscaler/flex-auth-pdp"]
	if hpa == nil {
		t.Fatal("no autoscaler")
	}
	spec := hpa["spec"].(map[string]any)
	if spec["minReplicas"].(float64) != 3 || spec["maxReplicas"].(float64) != 9 {
		t.Fatalf("hpa %v", spec)
	}
	if _, set := objs["Deployment/flex-auth-pdp"]["spec"].(map[string]any)["replicas"]; set {
		t.Fatal("the Deployment sets replicas beside the autoscaler: every upgrade would reset them")
	}
}

func TestPDPChartRefusals(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no TLS", set("", "tls", "secretName"), "tls.secretName is required"},
		{"no signing key", set("", "signingKey", "secretName"), "signingKey.secretName is required"},
		{"no binding", set(map[string]any{}, "caller", "bindings"), "at least one SYSTEM: PRINCIPAL"},
		{"a malformed service account", set(map[string]any{"secrets-engine": "system:serviceaccount:Secrets:engine"}, "caller", "bindings"), "want system:serviceaccount:<namespace>:<name>"},
		{"auth off", set("off", "caller", "mode"), `caller.mode "off": want enforce or warn`},
		{"no audience", set("", "caller", "audience"), "caller.audience may not be empty"},
		{"a plain-HTTP AuthZEN URL", set("http://pdp", "authzenBaseURL"), "want an https:// URL"},
		{"a PDB no drain can satisfy", set(1, "replicas"), "no pod could ever be evicted"},
		{"an autoscaler upside down", set(map[string]any{"enabled": true, "minReplicas": 4, "maxReplicas": 2}, "autoscaling"), "maxReplicas 2 is below minReplicas 4"},
		{"both an inline and an existing registry", set("reg", "registry", "existingConfigMap"), "registry.json and registry.existingConfigMap: give one"},
		{"no policy", set(map[string]any{}, "policy", "files"), "the policy package is required"},
		{"a policy without a manifest", func(v map[string]any) {
			delete(v["policy"].(map[string]any)["files"].(map[string]string), "manifest.json")
		}, "policy.files has no manifest.json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := renderPDP(t, examplePDPValues(t, tt.edit)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestPDPChartWatchBoundObjects: caller.watchBoundObjects renders
// --caller-watch-bound-objects, which the pdp accepts, and a ClusterRole
// granting list and watch on pods and serviceaccounts, nothing more; off
// by default, with neither.
func TestPDPChartWatchBoundObjects(t *testing.T) {
	out, err := renderPDP(t, examplePDPValues(t, set(true, "caller", "watchBoundObjects"), set("30m", "caller", "reviewInterval")))
	if err != nil {
		t.Fatal(err)
	}
	o, err := pdp.ParseArgs(findDeployment(t, out["pdp/templates/deployment.yaml"]).Spec.Template.Spec.Containers[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil || !o.Callers.WatchBoundObjects || o.Callers.ReviewInterval != 30*time.Minute {
		t.Fatalf("%v: watch %v, interval %s", err, o.Callers.WatchBoundObjects, o.Callers.ReviewInterval)
	}
	role := manifests(t, out)["ClusterRole/flex-auth-pdp-flex-auth-bound-objects"]
	if role == nil {
		t.Fatal("no ClusterRole for the watch")
	}
	if rules := fmt.Sprint(role["rules"]); rules != "[map[apiGroups:[] resources:[pods serviceaccounts] verbs:[list watch]]]" {
		t.Fatalf("rules %s", rules)
	}
	off, err := renderPDP(t, examplePDPValues(t))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(off["pdp/templates/rbac.yaml"], "bound-objects") || strings.Contains(off["pdp/templates/deployment.yaml"], "--caller-watch-bound-objects") {
		t.Fatal("watchBoundObjects off still renders the watch")
	}
}

// TestPDPChartDecisionLogAndTraces: the decision log's and the traces'
// values render flags the pdp itself accepts, mount what they name, and
// are refused when they could not work.
func TestPDPChartDecisionLogAndTraces(t *testing.T) {
	on := examplePDPValues(t,
		set(map[string]any{"enabled": true, "searchSecret": map[string]any{"name": "decisions-db"}, "keySecret": map[string]any{"name": "decisions-key"},
			"mode": "best-effort", "reader": "system:serviceaccount:audit:auditor", "sink": "https://logs.example:8443/logs"}, "decisionLog"),
		set(map[string]any{"otlpEndpoint": "otel-collector.observability.svc:4317", "caConfigMap": map[string]any{"name": "otel-ca"}, "sampleRatio": 0.25}, "tracing"))
	out, err := renderPDP(t, on)
	if err != nil {
		t.Fatal(err)
	}
	d := findDeployment(t, out["pdp/templates/deployment.yaml"])
	args := d.Spec.Template.Spec.Containers[0].Args
	o, err := pdp.ParseArgs(args)
	if err != nil {
		t.Fatalf("the pdp refuses the rendered flags: %v\n%s", err, strings.Join(args, "\n"))
	}
	dl := o.DecisionLog
	if d.Kind != "StatefulSet" || !strings.Contains(out["pdp/templates/deployment.yaml"], "name: decision-log\n") {
		t.Errorf("with the log on: a %s, without a volume claim a replica", d.Kind)
	}
	if dl.Dir != "/var/lib/pdp/decisions" || dl.Replica != "$(POD_NAME)" || dl.SearchURLFile != "/etc/pdp/decision-log-search/uri" || dl.KeyFile != "/etc/pdp/decision-log-key/decisions.key" || dl.Mode != "best-effort" ||
		dl.MaxEntries != 10_000_000 || dl.CallerMaxEntries != 1_000_000 || dl.MaxAge != 720*time.Hour || dl.Sink != "https://logs.example:8443/logs" {
		t.Errorf("decision log options %+v", dl)
	}
	if !slices.Contains(o.CallerBindings, "callerauth/decision-log=system:serviceaccount:audit:auditor") {
		t.Errorf("the reader is not bound: %v", o.CallerBindings)
	}
	if tr := o.Serve.Tracing; tr.Endpoint != "otel-collector.observability.svc:4317" || tr.Protocol != "grpc" || tr.CAFile != "/etc/pdp/otlp-ca/ca.crt" || tr.SampleRatio != 0.25 || tr.Insecure {
		t.Errorf("tracing options %+v", tr)
	}
	if err := dl.Check(); err != nil {
		t.Errorf("the pdp refuses the rendered decision log: %v", err)
	}
	mounts := map[string]string{}
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v.Secret.SecretName + v.ConfigMap.Name
	}
	for name, want := range map[string][2]string{"decision-log-search": {"/etc/pdp/decision-log-search", "decisions-db"}, "decision-log-key": {"/etc/pdp/decision-log-key", "decisions-key"}, "otlp-ca": {"/etc/pdp/otlp-ca", "otel-ca"}} {
		if mounts[name] != want[0] || vols[name] != want[1] {
			t.Errorf("volume %s: mounted at %q from %q, want %v", name, mounts[name], vols[name], want)
		}
	}

	// Off by default: no flag, no volume.
	out, err = renderPDP(t, examplePDPValues(t))
	if err != nil {
		t.Fatal(err)
	}
	d = findDeployment(t, out["pdp/templates/deployment.yaml"])
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--decision-log") || strings.HasPrefix(a, "--otlp") || strings.HasPrefix(a, "--trace") {
			t.Errorf("by default the chart renders %s", a)
		}
	}

	refuses(t, append(decisionLogRefusals(),
		refusal{"a plaintext sink", set(map[string]any{"enabled": true, "searchSecret": map[string]any{"name": "u"}, "keySecret": map[string]any{"name": "k"}, "sink": "http://logs.example/"}, "decisionLog"), "want an https:// URL"},
		refusal{"an unknown mode", set(map[string]any{"enabled": true, "searchSecret": map[string]any{"name": "u"}, "keySecret": map[string]any{"name": "k"}, "mode": "sometimes"}, "decisionLog"), "mode"},
		refusal{"a ratio over 1", set(map[string]any{"otlpEndpoint": "c:4317", "sampleRatio": 2}, "tracing"), "sampleRatio"},
	), func(edit func(map[string]any)) error {
		_, err := renderPDP(t, examplePDPValues(t, edit))
		return err
	})
}

// refusal is values a chart must refuse to render, and what its refusal
// names.
type refusal struct {
	name string
	edit func(map[string]any)
	want string
}

// decisionLogRefusals are the decisionLog and tracing values that the
// pdp's chart and callerauth-proxy's both refuse.
func decisionLogRefusals() []refusal {
	return []refusal{
		{"replicas and no shared search", set(map[string]any{"enabled": true, "keySecret": map[string]any{"name": "k"}}, "decisionLog"), "decisionLog.searchSecret.name is required"},
		{"no key Secret", set(map[string]any{"enabled": true, "searchSecret": map[string]any{"name": "u"}}, "decisionLog"), "decisionLog.keySecret.name is required"},
		{"settings while off", set(map[string]any{"reader": "system:serviceaccount:audit:auditor"}, "decisionLog"), "decisionLog.enabled is false"},
		{"an unknown protocol", set(map[string]any{"otlpEndpoint": "c:4317", "protocol": "udp"}, "tracing"), "protocol"},
	}
}

// refuses renders each case's values and wants the render refused,
// naming what the case says.
func refuses(t *testing.T, cases []refusal, render func(edit func(map[string]any)) error) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := render(c.edit); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal naming %q", err, c.want)
			}
		})
	}
}
