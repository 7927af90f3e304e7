package connector

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/serve"
)

// Options are the connector's flags. Start from [NewOptions], which holds
// every default; [Options.Complete] validates them and returns the
// [Config] that [New] reads.
type Options struct {
	Role       Role
	ConfigFile string // config.json
	NodeName   string // socket role: this node
	// Socket is the socket role's Unix socket; empty: DefaultSocket.
	Socket string
	// Serve: --listen, --tls-cert-file, --tls-key-file (deployment role),
	// --metrics-listen, --log-level, --shutdown-timeout, --http-*.
	Serve serve.Options
	// Callers: --caller-backend, --kubeconfig, --caller-cache-ttl,
	// --caller-review-timeout and the rest. The audience, mode and
	// fail-open come from config.json.
	Callers   callers.Options
	Datastore string // an SQLite file or a postgres:// URL (datastore.Parse)
	// DatastoreURLFile, when set, holds the datastore URL instead
	// (--datastore-url-file; datastore.Resolve).
	DatastoreURLFile string
	// MaxBatchEvents is the most events one HealthEventOccurredV1 call may
	// carry; a larger batch is refused whole (InvalidArgument).
	MaxBatchEvents int
	// MaxMessageBytes is the largest request message accepted; gRPC refuses
	// a larger one whole (ResourceExhausted).
	MaxMessageBytes int
	// QuotaEvents bounds the events one caller — its pod, for a pod-bound
	// token; its account otherwise; all tokenless callers together — may
	// store in QuotaWindow (--caller-quota-events, --caller-quota-window).
	QuotaEvents int
	QuotaWindow time.Duration
	// KeyRetention is how long a batch's idempotency key is kept
	// (--idempotency-key-retention): a retry later than that is stored as
	// a new batch.
	KeyRetention time.Duration
	// MaxDatastoreBytes bounds what the datastore may hold; past it, new
	// batches are refused (--max-datastore-bytes), never the disk filled.
	MaxDatastoreBytes int64
	// MaxPublisherBytes is each publisher's share of it
	// (--max-publisher-bytes): past its share, a publisher's batches are
	// refused, the others' still stored. 0: a sixteenth of
	// MaxDatastoreBytes.
	MaxPublisherBytes int64
}

// NewOptions returns the connector's defaults: the one place they are
// written. nodeName is the socket role's node ($NODE_NAME).
func NewOptions(nodeName string) Options {
	return Options{Role: RoleSocket, ConfigFile: "/etc/platform-connector/config.json", NodeName: nodeName,
		Serve: serve.NewOptions("", "127.0.0.1:2112").For("platform-connector"), Callers: callers.NewOptions(), Datastore: "/var/lib/platform-connector/events.db",
		MaxBatchEvents: DefaultMaxBatchEvents, MaxMessageBytes: DefaultMaxMessageBytes, QuotaEvents: DefaultQuotaEvents, QuotaWindow: DefaultQuotaWindow,
		KeyRetention: DefaultKeyRetention, MaxDatastoreBytes: DefaultMaxDatastoreBytes}
}

// AddFlags registers the connector's flags, with o's values as their
// defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar((*string)(&o.Role), "role", string(o.Role), "socket (node-local DaemonSet) or deployment")
	f.StringVar(&o.ConfigFile, "config", o.ConfigFile, "config.json with the node-binding settings")
	f.StringVar(&o.NodeName, "node-name", o.NodeName, "socket role: this node (default $NODE_NAME)")
	f.StringVar(&o.Socket, "socket", o.Socket, "socket role: the Unix socket to listen on (default "+DefaultSocket+")")
	f.StringVar(&o.Datastore, "datastore", o.Datastore, "where events are stored: an SQLite file (or sqlite:///path), or a postgres:// URL for deployment-role replicas sharing one database (password from PGPASSWORD or PGPASSFILE)")
	f.StringVar(&o.DatastoreURLFile, "datastore-url-file", o.DatastoreURLFile, datastore.FileFlagHelp)
	f.IntVar(&o.MaxBatchEvents, "max-batch-events", o.MaxBatchEvents, "most events one call may carry; a larger batch is refused whole (InvalidArgument)")
	f.IntVar(&o.MaxMessageBytes, "max-message-bytes", o.MaxMessageBytes, "largest request message; a larger one is refused whole (ResourceExhausted)")
	f.IntVar(&o.QuotaEvents, "caller-quota-events", o.QuotaEvents, "events one caller (its pod, for a pod-bound token; all tokenless callers together) may store per --caller-quota-window; beyond, ResourceExhausted publisher_quota with the delay to retry after")
	f.DurationVar(&o.QuotaWindow, "caller-quota-window", o.QuotaWindow, "the window --caller-quota-events counts in (at least 1s)")
	f.DurationVar(&o.KeyRetention, "idempotency-key-retention", o.KeyRetention, "how long a batch's idempotency key is kept: a retry later than that is stored as a new batch (at least 1m)")
	f.Int64Var(&o.MaxDatastoreBytes, "max-datastore-bytes", o.MaxDatastoreBytes, "what the datastore may hold (the SQLite file's pages and write-ahead log, or the PostgreSQL tables); past it, new batches are refused ResourceExhausted datastore_full, never the disk filled (at least 1 MiB)")
	f.Int64Var(&o.MaxPublisherBytes, "max-publisher-bytes", o.MaxPublisherBytes, "each publisher's share of --max-datastore-bytes (its pod, for a pod-bound token; its account for another; its user on the node without one): past it, that publisher's batches are refused ResourceExhausted publisher_share_full, the others' still stored (0: a sixteenth of --max-datastore-bytes; 64 KiB at least)")
	o.Serve.AddFlags(f)
	serve.AddCallerFlags(f, &o.Callers)
	// The names these two had before every service shared one set.
	for old, name := range map[string]string{"auth-cache-ttl": "caller-cache-ttl", "auth-review-timeout": "caller-review-timeout"} {
		f.AddFlag(&pflag.Flag{Name: old, Value: f.Lookup(name).Value, DefValue: f.Lookup(name).DefValue})
	}
	_ = f.MarkDeprecated("auth-cache-ttl", "use --caller-cache-ttl")
	_ = f.MarkDeprecated("auth-review-timeout", "use --caller-review-timeout")
}

// Validate refuses options that cannot be honoured: what
// [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
}

// Config is the connector's completed configuration, as [New] reads it.
type Config struct {
	Role     Role
	NodeName string
	Socket   string
	Serve    serve.Options
	// Callers is the caller authentication; Complete makes it from the
	// flags, a program may set callers.Custom instead.
	Callers callers.Config
	// Logger nil: JSON at --log-level on standard error.
	Logger *slog.Logger
	// Auth is config.json as written; Callers holds what is in force (the
	// deployment role always enforces and never fails open).
	Auth AuthConfig
	// Datastore is the resolved target (--datastore or the first line of
	// --datastore-url-file).
	Datastore                                    string
	MaxBatchEvents, MaxMessageBytes, QuotaEvents int
	QuotaWindow, KeyRetention                    time.Duration
	MaxDatastoreBytes, MaxPublisherBytes         int64
}

// Complete loads config.json and validates the options against it —
// refusing every one that cannot be honoured, naming its flag or key —
// and returns the configuration New reads: config.json parsed, the
// datastore resolved, the role's defaults and settings in force.
func (o Options) Complete() (Config, error) {
	auth, err := LoadAuthConfig(o.ConfigFile)
	if err != nil {
		return Config{}, err
	}
	var errs []error
	if err := o.Serve.Validate(); err != nil {
		errs = append(errs, err)
	}
	// config.json holds the connector's own caller settings; the
	// deployment role, with no node to fall back on, always enforces and
	// never fails open, and watches every node's pods.
	o.Callers.Audience, o.Callers.Mode, o.Callers.FailOpenOnUnavailable = auth.Audience, string(auth.Mode), auth.FailOpenOnUnavailable
	o.Callers.WatchNode = o.NodeName
	if o.Role == RoleDeployment {
		o.Callers.Mode, o.Callers.FailOpenOnUnavailable, o.Callers.WatchNode = callers.ModeEnforce, false, ""
	}
	if !auth.EnableNodeBindingAuth {
		o.Callers.Mode, o.Callers.CanBeOff, o.Callers.AllowOff = callers.ModeOff, true, true
	}
	callerCfg, err := o.Callers.Complete()
	if err != nil {
		errs = append(errs, err)
	}
	if o.MaxBatchEvents < 1 {
		errs = append(errs, fmt.Errorf("connector: --max-batch-events %d: want at least 1", o.MaxBatchEvents))
	}
	if o.MaxMessageBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("connector: --max-message-bytes %d: want at least 1024", o.MaxMessageBytes))
	}
	if o.QuotaEvents < 1 {
		errs = append(errs, fmt.Errorf("connector: --caller-quota-events %d: want at least 1", o.QuotaEvents))
	}
	if o.QuotaWindow < time.Second {
		errs = append(errs, fmt.Errorf("connector: --caller-quota-window %s: want at least 1s", o.QuotaWindow))
	}
	if o.KeyRetention < time.Minute {
		errs = append(errs, fmt.Errorf("connector: --idempotency-key-retention %s: want at least 1m (a publisher's retries must find their key)", o.KeyRetention))
	}
	if o.MaxDatastoreBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("connector: --max-datastore-bytes %d: want at least 1 MiB", o.MaxDatastoreBytes))
	}
	if o.MaxPublisherBytes < 0 || o.MaxPublisherBytes > o.MaxDatastoreBytes || (o.MaxPublisherBytes > 0 && o.MaxPublisherBytes < 64<<10) {
		errs = append(errs, fmt.Errorf("connector: --max-publisher-bytes %d: want 64 KiB to --max-datastore-bytes (%d), or 0 for a sixteenth of it", o.MaxPublisherBytes, o.MaxDatastoreBytes))
	}
	switch o.Role {
	case RoleSocket:
		if o.NodeName == "" {
			errs = append(errs, errors.New("connector: the socket role needs its node: set NODE_NAME or --node-name"))
		}
		o.Socket = cmp.Or(o.Socket, DefaultSocket)
		if len(o.Socket) > MaxSocketPath {
			errs = append(errs, fmt.Errorf("connector: --socket %s is %d bytes: a Unix socket's path is at most %d (daemonset.socketDir at most %d)",
				o.Socket, len(o.Socket), MaxSocketPath, MaxSocketPath-len("/platform-connector.sock")))
		}
		if o.Serve.Listen != "" || o.Serve.HasTLS() {
			errs = append(errs, errors.New("connector: --listen, --tls-cert-file and --tls-key-file belong to the deployment role"))
		}
	case RoleDeployment:
		if !auth.EnableNodeBindingAuth {
			errs = append(errs, fmt.Errorf("connector: the deployment role requires %s: true; with no local node there is nothing to pin an unauthenticated caller to", KeyEnable))
		}
		if o.Serve.Listen == "" {
			errs = append(errs, errors.New("connector: the deployment role needs --listen"))
		}
		if !o.Serve.HasTLS() {
			errs = append(errs, errors.New("connector: the deployment role serves TLS only: set --tls-cert-file and --tls-key-file (bearer tokens never travel over plaintext TCP)"))
		}
		if o.Socket != "" {
			errs = append(errs, errors.New("connector: --socket belongs to the socket role"))
		}
	default:
		errs = append(errs, fmt.Errorf("connector: --role %q: want socket or deployment", o.Role))
	}
	target, err := datastore.Resolve(o.Datastore, o.DatastoreURLFile)
	if err != nil {
		errs = append(errs, fmt.Errorf("connector: %w", err))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	c := Config{Role: o.Role, NodeName: o.NodeName, Socket: o.Socket, Serve: o.Serve, Callers: callerCfg, Auth: auth, Datastore: target,
		MaxBatchEvents: o.MaxBatchEvents, MaxMessageBytes: o.MaxMessageBytes, QuotaEvents: o.QuotaEvents, QuotaWindow: o.QuotaWindow,
		KeyRetention: o.KeyRetention, MaxDatastoreBytes: o.MaxDatastoreBytes, MaxPublisherBytes: cmp.Or(o.MaxPublisherBytes, o.MaxDatastoreBytes/16)}
	return c, nil
}
