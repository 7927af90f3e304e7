package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/serve"
	"github.com/callerauth/callerauth/internal/services/vmafx/connection"
	"github.com/callerauth/callerauth/internal/services/vmafx/measure"
)

// Options are the node's flags. Start from [NewOptions], which holds every
// default; [Options.Complete] validates them and returns the [Config]
// that [New] reads.
type Options struct {
	// Config is a YAML file whose "controller" section holds the
	// connection (address, tls, ca_file, server_name, token_file, token);
	// VMAFX_CONTROLLER_* environment variables override it.
	Config string
	// LookupEnv reads the environment (the VMAFX_CONTROLLER_* variables).
	LookupEnv func(string) (string, bool)
	// Poll is the wait between claims when nothing is pending (or the
	// controller cannot be reached).
	Poll time.Duration
	// ReportEvery is how often a running job's progress is reported, which
	// renews its lease.
	ReportEvery time.Duration
	// ClipRoot holds one directory per tenant: a job's clips are opened
	// beneath <ClipRoot>/<tenant> and nowhere else (--clip-root).
	ClipRoot string
	// NodeName names this node (its pod) when its token has no pod claim
	// (--node-name).
	NodeName string
	// MaxFramePixels and MaxFrames bound a clip (--max-frame-pixels,
	// --max-frames).
	MaxFramePixels, MaxFrames int
	// MaxJobDuration bounds one measurement: past it the job is given back
	// (--max-job-duration; 0: no bound).
	MaxJobDuration time.Duration
	// Serve: --metrics-listen, --profiling, --log-level and
	// --shutdown-timeout (how long a stopping node waits for its
	// measurement to end after cancelling it).
	Serve serve.Options
}

// NewOptions returns the node's defaults: the one place they are
// written. nodeName is its pod ($POD_NAME).
func NewOptions(nodeName string) Options {
	return Options{LookupEnv: os.LookupEnv, Poll: 2 * time.Second, ReportEvery: 5 * time.Second, ClipRoot: DefaultClipRoot, NodeName: nodeName,
		MaxFramePixels: measure.DefaultMaxFramePixels, MaxFrames: measure.DefaultMaxFrames, MaxJobDuration: DefaultMaxJobDuration,
		Serve: serve.NewOptions("", DefaultMetricsListen).For("vmafx-node")}
}

// AddFlags registers the node's flags, with o's values as their defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Config, "config", o.Config, "YAML file with a controller section (keys: address, tls, ca_file, server_name, token_file, token)")
	f.DurationVar(&o.Poll, "poll", o.Poll, "wait between claims when nothing is pending")
	f.DurationVar(&o.ReportEvery, "report-every", o.ReportEvery, "how often a running job's progress is reported (renewing its lease)")
	f.StringVar(&o.ClipRoot, "clip-root", o.ClipRoot, "directory of one directory per tenant: a job's clips are opened beneath <clip-root>/<tenant> and nowhere else")
	f.StringVar(&o.NodeName, "node-name", o.NodeName, "this node's name (its pod) in job status and logs when its token carries no pod claim; default $POD_NAME")
	f.IntVar(&o.MaxFramePixels, "max-frame-pixels", o.MaxFramePixels, "largest frame measured, width×height; a larger clip fails its job frame_too_large")
	f.IntVar(&o.MaxFrames, "max-frames", o.MaxFrames, "most frames measured; a longer clip fails its job too_many_frames")
	f.DurationVar(&o.MaxJobDuration, "max-job-duration", o.MaxJobDuration, "longest one measurement may take before the job is given back (counted as an attempt); 0 for no bound")
	o.Serve.AddProcessFlags(f)
	f.Lookup("shutdown-timeout").Usage = "on SIGTERM, how long to wait for the running measurement to stop after cancelling it"
}

// Validate refuses options that cannot be honoured: what
// [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
}

// Config is the node's completed configuration, as [New] reads it.
type Config struct {
	// Controller is the connection, loaded from --config and the
	// environment.
	Controller                credentials.Config
	Poll, ReportEvery         time.Duration
	ClipRoot, NodeName        string
	MaxFramePixels, MaxFrames int
	// MaxJobDuration zero: no bound.
	MaxJobDuration time.Duration
	Serve          serve.Options
	// Logger nil: JSON at --log-level on standard error.
	Logger *slog.Logger
}

// Complete loads and validates the controller connection — a combination
// that cannot be honoured is an error naming the key and the variable —
// and the flags, and returns the configuration New reads.
func (o Options) Complete() (Config, error) {
	var errs []error
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Serve.Listen != "" || o.Serve.HasTLS() {
		errs = append(errs, errors.New("node: the node serves no API: --listen and --tls-* do not apply"))
	}
	if !filepath.IsAbs(o.ClipRoot) {
		errs = append(errs, fmt.Errorf("node: --clip-root %q: want an absolute path", o.ClipRoot))
	}
	if o.Poll <= 0 || o.ReportEvery <= 0 {
		errs = append(errs, fmt.Errorf("node: --poll %s, --report-every %s: want positive durations", o.Poll, o.ReportEvery))
	}
	if o.MaxFramePixels <= 0 || o.MaxFrames <= 0 {
		errs = append(errs, fmt.Errorf("node: --max-frame-pixels %d, --max-frames %d: want positive numbers", o.MaxFramePixels, o.MaxFrames))
	}
	if o.MaxJobDuration < 0 {
		errs = append(errs, fmt.Errorf("node: --max-job-duration %s: want zero (no bound) or a positive duration", o.MaxJobDuration))
	}
	if len(o.NodeName) > 253 {
		errs = append(errs, errors.New("node: --node-name: at most 253 bytes"))
	}
	controller, err := connection.Load(o.Config, o.LookupEnv)
	if err != nil {
		errs = append(errs, fmt.Errorf("node: %w", err))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return Config{Controller: controller, Poll: o.Poll, ReportEvery: o.ReportEvery, ClipRoot: o.ClipRoot, NodeName: o.NodeName,
		MaxFramePixels: o.MaxFramePixels, MaxFrames: o.MaxFrames, MaxJobDuration: o.MaxJobDuration, Serve: o.Serve}, nil
}
