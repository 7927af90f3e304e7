package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
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
