package chart_test

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/callerauth/callerauth/internal/services/connector"
	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
	"github.com/callerauth/callerauth/internal/services/vmafx/node"
	"github.com/callerauth/callerauth/internal/services/vmafx/operator"
)

const tracingValues = "tracing:\n  otlpEndpoint: otel-collector.observability.svc:4317\n  caConfigMap: {name: otel-ca}\n  sampleRatio: 0.5\n"

// TestTracingInEveryWorkload: the platform-connector's and vmafx's charts
// pass tracing to each of their workloads — flags the binary itself
// parses, the receiver's CA mounted where --otlp-ca-file says — and
// render nothing of it by default.
func TestTracingInEveryWorkload(t *testing.T) {
	type workload struct {
		name string
		spec corev1.PodSpec
		cmd  *cobra.Command
	}
	connectorOut := func(values string) []workload {
		t.Helper()
		out, err := render(t, "nvsentinel", auth("    enabled: true\n")+"deployment:\n  enabled: true\n"+values)
		if err != nil {
			t.Fatal(err)
		}
		cmd := func() *cobra.Command {
			return connector.NewCommand(io.Discard, io.Discard, func(string) string { return "" })
		}
		return []workload{
			{"connector DaemonSet", daemonSet(t, out["platform-connector/templates/daemonset.yaml"]).Spec.Template.Spec, cmd()},
			{"connector Deployment", deploymentOf(t, out["platform-connector/templates/deployment.yaml"]).Spec.Template.Spec, cmd()},
		}
	}
	vmafxOut := func(values string) []workload {
		t.Helper()
		out, err := renderVmafx(t, goodVmafx+values)
		if err != nil {
			t.Fatal(err)
		}
		return []workload{
			{"vmafx controller", deploymentOf(t, out["vmafx/templates/controller.yaml"]).Spec.Template.Spec, controller.NewCommand(io.Discard)},
			{"vmafx node", daemonSet(t, out["vmafx/templates/node.yaml"]).Spec.Template.Spec, node.NewCommand(io.Discard)},
			{"vmafx operator", deploymentOf(t, out["vmafx/templates/operator.yaml"]).Spec.Template.Spec, operator.NewCommand(io.Discard)},
		}
	}
	for _, w := range append(connectorOut(tracingValues), vmafxOut(tracingValues)...) {
		c := w.spec.Containers[0]
		if err := w.cmd.ParseFlags(c.Args); err != nil {
			t.Errorf("%s refuses the chart's arguments: %v", w.name, err)
			continue
		}
		f := w.cmd.Flags()
		endpoint, _ := f.GetString("otlp-endpoint")
		caFile, _ := f.GetString("otlp-ca-file")
		ratio, _ := f.GetFloat64("trace-sample-ratio")
		if endpoint != "otel-collector.observability.svc:4317" || caFile != "/etc/otlp-ca/ca.crt" || ratio != 0.5 {
			t.Errorf("%s: --otlp-endpoint %q, --otlp-ca-file %q, --trace-sample-ratio %v", w.name, endpoint, caFile, ratio)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.Name == "otlp-ca" && m.MountPath == "/etc/otlp-ca")
		}
		volume := false
		for _, v := range w.spec.Volumes {
			volume = volume || (v.Name == "otlp-ca" && v.ConfigMap != nil && v.ConfigMap.Name == "otel-ca")
		}
		if !mounted || !volume {
			t.Errorf("%s: the CA bundle mounted %v, its volume %v", w.name, mounted, volume)
		}
	}
	for _, w := range append(connectorOut(""), vmafxOut("")...) {
		for _, a := range w.spec.Containers[0].Args {
			if strings.HasPrefix(a, "--otlp") || strings.HasPrefix(a, "--trace") {
				t.Errorf("%s: by default the chart renders %s", w.name, a)
			}
		}
	}
}
