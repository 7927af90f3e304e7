package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	jobsv1 "github.com/callerauth/callerauth/api/vmafxjob/v1alpha1"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/services/vmafx/connection"
)

// DefaultMetricsListen is --metrics-listen's default, controller-runtime's
// metrics address.
const DefaultMetricsListen = "127.0.0.1:8080"

// Operator is the VmafxJob operator, built: the controller connection and
// controller-runtime's manager, run as one of the skeleton's runnables.
type Operator struct {
	m    *serve.Manager
	conn io.Closer
}

// New dials the controller and builds controller-runtime's manager with
// the VmafxJob reconciler, as c says.
func New(c Config) (_ *Operator, err error) {
	cfg := c.Controller
	conn, jobs, err := connection.Dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	defer func() {
		if err != nil {
			_ = conn.Close()
		}
	}()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := jobsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	m, err := serve.New("operator", c.Serve, c.Logger)
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	m.Health().Registry.MustRegister(serve.BuildInfo("vmafx_operator"))
	log := m.Logger()
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	// The skeleton serves /metrics, /healthz and /readyz; controller-runtime's
	// own listeners stay off and its registry is served beside ours.
	mgr, err := ctrl.NewManager(c.REST, ctrl.Options{
		Scheme: scheme, LeaderElection: c.LeaderElect, LeaderElectionID: "vmafx-operator.vmafx.callerauth.dev",
		LeaderElectionNamespace: c.LeaderElectionNamespace,
		Metrics:                 metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	m.Health().AddGatherer(withoutRuntime{ctrlmetrics.Registry})
	m.Health().AddReadyCheck("informers", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the VmafxJob informer has not synced")
		}
		return nil
	})
	r := &Reconciler{Client: mgr.GetClient(), Jobs: jobs, Tokens: cfg.TokenSource(), Poll: c.Poll,
		Events: mgr.GetEventRecorder("vmafx-operator"), Log: log}
	if err := ctrl.NewControllerManagedBy(mgr).For(&jobsv1.VmafxJob{}).Named("vmafxjob").Complete(r); err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	m.Add(serve.Named("controller-runtime manager", mgr))
	m.Set("controller", cfg.Address, "controller_tls", cfg.TLS, "token_file", cfg.TokenFile, "poll", c.Poll.String(), "leader_elect", c.LeaderElect)
	return &Operator{m: m, conn: conn}, nil
}

// Run serves until ctx ends: the metrics listener and controller-runtime's
// manager, through the skeleton.
func (op *Operator) Run(ctx context.Context) error { return op.m.Run(ctx) }

// Close closes the controller connection.
func (op *Operator) Close() error { return op.conn.Close() }

// withoutRuntime is controller-runtime's registry without the Go and
// process collectors the skeleton's registry already has.
type withoutRuntime struct{ g prometheus.Gatherer }

func (w withoutRuntime) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := w.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if n := mf.GetName(); !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			out = append(out, mf)
		}
	}
	return out, err
}

// NewCommand is the vmafx-operator command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "vmafx-operator",
		Short: "Reconcile VmafxJobs against the vmafx controller",
		Long: `vmafx-operator submits every VmafxJob to the vmafx controller once and polls
GetJob until it finishes, writing phase, scores and conditions into its status.
Its controller connection is the "controller" section of --config and the
VMAFX_CONTROLLER_* variables, as for vmafx-node; the token file is read on
every call. See docs/vmafx.md.`,
	}
	build := serve.Complete(&o, New)
	serve.Command(cmd, &o.Serve, stderr, func(cmd *cobra.Command) (serve.Service, error) {
		if err := probeAlias(cmd.Flags(), &o); err != nil {
			return nil, err
		}
		return build(cmd)
	})
	o.AddFlags(cmd.Flags())
	return cmd
}

// zeroOff reads controller-runtime's "0" (off) as the skeleton's "".
type zeroOff struct{ pflag.Value }

func (z zeroOff) Set(v string) error {
	if v == "0" {
		v = ""
	}
	return z.Value.Set(v)
}

// probeAlias applies --health-probe-bind-address: the probes are served on
// --metrics-listen, so the two must agree.
func probeAlias(f *pflag.FlagSet, o *Options) error {
	if !f.Changed("health-probe-bind-address") {
		return nil
	}
	if o.HealthProbeBindAddress == "0" {
		o.HealthProbeBindAddress = "" // controller-runtime's "off"
	}
	if !f.Changed("metrics-listen") && !f.Changed("metrics-bind-address") {
		o.Serve.MetricsListen = o.HealthProbeBindAddress
		return nil
	}
	if o.HealthProbeBindAddress != o.Serve.MetricsListen {
		return fmt.Errorf("operator: --health-probe-bind-address %s: /healthz and /readyz are served on --metrics-listen %s; give one address", o.HealthProbeBindAddress, o.Serve.MetricsListen)
	}
	return nil
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
