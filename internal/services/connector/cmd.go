package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/serve"
)

// NewCommand is the platform-connector command line. getenv reads the
// environment (NODE_NAME).
func NewCommand(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	o := NewOptions(getenv("NODE_NAME"))
	cmd := &cobra.Command{
		Use:   "platform-connector",
		Short: "Receive health events over gRPC, with node-binding authentication",
		Long: `platform-connector stores health events about nodes. In the socket role it
runs on each node (a DaemonSet), listens on a Unix socket and pins callers
to its node; in the deployment role it listens on TCP with TLS and every
caller needs a pod-bound token. config.json (the ConfigMap) holds the
node-binding settings; see docs/platform-connector.md.`,
	}
	serve.Command(cmd, &o.Serve, stderr, serve.Complete(&o, New))
	o.AddFlags(cmd.Flags())
	cmd.AddCommand(newEventsCommand(stdout), newHostDirsCommand(stdout))
	return cmd
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

func newEventsCommand(stdout io.Writer) *cobra.Command {
	var db, node string
	var limit int
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the stored events, one JSON object per line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if d, path, err := datastore.Parse(db); err != nil {
				return fmt.Errorf("--datastore: %w", err)
			} else if d == datastore.SQLite {
				if _, err := os.Stat(path); err != nil {
					return fmt.Errorf("--datastore: %w", err)
				}
			}
			s, err := OpenStore(db)
			if err != nil {
				return err
			}
			defer s.Close()
			events, err := s.List(cmd.Context(), node, limit)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(stdout)
			for _, e := range events {
				ev, _ := protojson.Marshal(e.Event)
				if err := enc.Encode(map[string]any{
					"id": e.ID, "node": e.Node, "caller": e.Caller, "scope": e.Scope,
					"received_at": e.ReceivedAt.UTC().Format(time.RFC3339Nano), "event": json.RawMessage(ev),
				}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&db, "datastore", "/var/lib/platform-connector/events.db", "the datastore: an SQLite file or a postgres:// URL")
	cmd.Flags().StringVar(&node, "node", "", "only events about this node")
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many events")
	return cmd
}

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	return serve.Execute(ctx, NewCommand(os.Stdout, os.Stderr, os.Getenv), args, os.Stderr)
}
