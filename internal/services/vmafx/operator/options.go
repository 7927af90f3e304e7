package operator

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

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
	// HealthProbeBindAddress is controller-runtime's former probe address
	// (--health-probe-bind-address): it must be --metrics-listen's, or
	// becomes it.
	HealthProbeBindAddress string
}

// NewOptions returns the operator's defaults: the one place they are
// written.
func NewOptions() Options {
	return Options{Config: "/etc/vmafx/operator.yaml", LookupEnv: os.LookupEnv, Poll: 5 * time.Second, LeaderElect: true,
		LeaderElectionNamespace: "vmafx-system", Serve: serve.NewOptions("", DefaultMetricsListen).For("vmafx-operator")}
}

// AddFlags registers the operator's flags, with o's values as their
// defaults: its own, the process flags, and controller-runtime's names
// for two of them.
func (o *Options) AddFlags(f *pflag.FlagSet) {
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
	f.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "former address of /healthz and /readyz, now served on --metrics-listen: if set, it must be that address (or --metrics-listen unset, and it becomes it)")
}

// Validate refuses options that cannot be honoured: what
// [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
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
