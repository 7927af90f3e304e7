package operator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	jobsv1 "github.com/callerauth/callerauth/api/vmafxjob/v1alpha1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/vmafx/connection"
)

// Options configure the operator.
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
	MetricsAddr, ProbeAddr  string
	Logger                  *slog.Logger
}

// Load reads and validates the controller connection: a combination that
// cannot be honoured is an error naming the key and the variable.
func Load(o Options) (credentials.Config, error) {
	cfg, err := connection.Load(o.Config, o.LookupEnv)
	if err != nil {
		return cfg, fmt.Errorf("operator: %w", err)
	}
	return cfg, nil
}

// Run starts the manager with the VmafxJob reconciler until ctx ends.
func Run(ctx context.Context, o Options) error {
	cfg, err := Load(o)
	if err != nil {
		return err
	}
	conn, jobs, err := connection.Dial(cfg)
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	defer conn.Close()
	var rc *rest.Config
	if o.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		rc, err = ctrl.GetConfig()
	}
	if err != nil {
		return fmt.Errorf("operator: --kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := jobsv1.AddToScheme(scheme); err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme: scheme, LeaderElection: o.LeaderElect, LeaderElectionID: "vmafx-operator.vmafx.callerauth.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr}, HealthProbeBindAddress: o.ProbeAddr,
	})
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	_ = mgr.AddHealthzCheck("healthz", healthz.Ping)
	_ = mgr.AddReadyzCheck("readyz", healthz.Ping)
	r := &Reconciler{Client: mgr.GetClient(), Jobs: jobs, Tokens: cfg.TokenSource(), Poll: o.Poll,
		Events: mgr.GetEventRecorder("vmafx-operator"), Log: log}
	if err := ctrl.NewControllerManagedBy(mgr).For(&jobsv1.VmafxJob{}).Named("vmafxjob").Complete(r); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	log.Info("operator: starting", "controller", cfg.Address, "tls", cfg.TLS, "token_file", cfg.TokenFile, "poll", o.Poll.String(), "leader_elect", o.LeaderElect)
	return mgr.Start(ctx)
}

// NewCommand is the vmafx-operator command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	var o Options
	var logLevel string
	cmd := &cobra.Command{
		Use:   "vmafx-operator",
		Short: "Reconcile VmafxJobs against the vmafx controller",
		Long: `vmafx-operator submits every VmafxJob to the vmafx controller once and polls
GetJob until it finishes, writing phase, scores and conditions into its status.
Its controller connection is the "controller" section of --config and the
VMAFX_CONTROLLER_* variables, as for vmafx-node; the token file is read on
every call. See docs/vmafx.md.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := serve.NewLogger(logLevel, stderr)
			if err != nil {
				return err
			}
			if o.Poll <= 0 {
				return fmt.Errorf("--poll %s: want a positive duration", o.Poll)
			}
			o.Logger = log
			return Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Config, "config", "/etc/vmafx/operator.yaml", "YAML file with a controller section (keys: address, tls, ca_file, server_name, token_file, token)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the API server (default: in-cluster, or $KUBECONFIG)")
	f.DurationVar(&o.Poll, "poll", 5*time.Second, "GetJob interval of a job that has not finished")
	f.BoolVar(&o.LeaderElect, "leader-elect", true, "run one active replica, elected with a Lease")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "vmafx-system", "namespace of the leader-election Lease")
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", "127.0.0.1:8080", "the manager's /metrics (0: off)")
	f.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "the manager's /healthz and /readyz")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}
