package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	jobsv1 "github.com/callerauth/callerauth/api/vmafxjob/v1alpha1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/services/vmafx/connection"
)

// Options are the operator's flags. Start from [NewOptions], which holds
// every default; [Options.Complete] validates them and returns the
// [Config] that [New] reads.
type Options struct {
	// Config is a YAML file whose "controller" section holds the
	// controller connection (the node's keys); VMAFX_CONTROLLER_* override.
	Config    string
	LookupEnv func(string) (string, bool)
	// Kubeconfig for the API server; empty: in-cluster (or $KUBECONFIG).
	Kubeconfig string
	// Poll is the GetJob interval of a running job.
	Poll time.Duration
	// LeaderElect runs one active replica; LeaderElectionNamespace holds
	// its Lease.
	LeaderElect             bool
	LeaderElectionNamespace string
	// Serve: --metrics-listen (/metrics — the operator's and
	// controller-runtime's — /healthz and /readyz on one listener),
	// --profiling, --log-level, --shutdown-timeout.
	Serve serve.Options
}

// NewOptions returns the operator's defaults: the one place they are
// written.
func NewOptions() Options {
	return Options{Config: "/etc/vmafx/operator.yaml", LookupEnv: os.LookupEnv, Poll: 5 * time.Second, LeaderElect: true,
		LeaderElectionNamespace: "vmafx-system", Serve: serve.NewOptions("", DefaultMetricsListen)}
}

// Config is the operator's completed configuration, as [New] reads it.
type Config struct {
	// Controller is the connection, loaded from --config and the
	// environment; REST the API server's, from --kubeconfig.
	Controller              credentials.Config
	REST                    *rest.Config
	Poll                    time.Duration
	LeaderElect             bool
	LeaderElectionNamespace string
	Serve                   serve.Options
	// Logger nil: JSON at --log-level on standard error.
	Logger *slog.Logger
}

// DefaultMetricsListen is --metrics-listen's default, controller-runtime's
// metrics address.
const DefaultMetricsListen = "127.0.0.1:8080"

// Complete validates the options — every setting that cannot be honoured
// is reported, naming its flag, and a controller connection that cannot be
// an error naming the key and the variable — loads the controller
// connection and the API server's, and returns the configuration New
// reads.
func (o Options) Complete() (Config, error) {
	var errs []error
	if o.Poll <= 0 {
		errs = append(errs, fmt.Errorf("operator: --poll %s: want a positive duration", o.Poll))
	}
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	controller, err := connection.Load(o.Config, o.LookupEnv)
	if err != nil {
		errs = append(errs, fmt.Errorf("operator: %w", err))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	var rc *rest.Config
	if o.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		rc, err = ctrl.GetConfig()
	}
	if err != nil {
		return Config{}, fmt.Errorf("operator: --kubeconfig: %w", err)
	}
	return Config{Controller: controller, REST: rc, Poll: o.Poll, LeaderElect: o.LeaderElect, LeaderElectionNamespace: o.LeaderElectionNamespace, Serve: o.Serve}, nil
}

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
	var probeAddr string
	cmd := &cobra.Command{
		Use:   "vmafx-operator",
		Short: "Reconcile VmafxJobs against the vmafx controller",
		Long: `vmafx-operator submits every VmafxJob to the vmafx controller once and polls
GetJob until it finishes, writing phase, scores and conditions into its status.
Its controller connection is the "controller" section of --config and the
VMAFX_CONTROLLER_* variables, as for vmafx-node; the token file is read on
every call. See docs/vmafx.md.`,
	}
	serve.Command(cmd, &o.Serve, stderr, func(cmd *cobra.Command) (serve.Service, error) {
		if err := probeAlias(cmd.Flags(), &o, probeAddr); err != nil {
			return nil, err
		}
		c, err := o.Complete()
		if err != nil {
			return nil, err
		}
		return New(c)
	})
	f := cmd.Flags()
	f.StringVar(&o.Config, "config", o.Config, "YAML file with a controller section (keys: address, tls, ca_file, server_name, token_file, token)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the API server (default: in-cluster, or $KUBECONFIG)")
	f.DurationVar(&o.Poll, "poll", o.Poll, "GetJob interval of a job that has not finished")
	f.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run one active replica, elected with a Lease")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "namespace of the leader-election Lease")
	o.Serve.AddProcessFlags(f)
	// controller-runtime's names, kept: the metrics address is
	// --metrics-listen ("0" off, as controller-runtime reads it); the probes
	// are served on the same listener.
	f.AddFlag(&pflag.Flag{Name: "metrics-bind-address", Usage: "former name of --metrics-listen (0: off)", Value: zeroOff{f.Lookup("metrics-listen").Value}, DefValue: o.Serve.MetricsListen})
	f.StringVar(&probeAddr, "health-probe-bind-address", "", "former address of /healthz and /readyz, now served on --metrics-listen: if set, it must be that address (or --metrics-listen unset, and it becomes it)")
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
func probeAlias(f *pflag.FlagSet, o *Options, probe string) error {
	if !f.Changed("health-probe-bind-address") {
		return nil
	}
	if probe == "0" {
		probe = "" // controller-runtime's "off"
	}
	if !f.Changed("metrics-listen") && !f.Changed("metrics-bind-address") {
		o.Serve.MetricsListen = probe
		return nil
	}
	if probe != o.Serve.MetricsListen {
		return fmt.Errorf("operator: --health-probe-bind-address %s: /healthz and /readyz are served on --metrics-listen %s; give one address", probe, o.Serve.MetricsListen)
	}
	return nil
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
