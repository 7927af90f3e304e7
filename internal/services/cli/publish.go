package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/services/connector"
)

func newPublishCmd(o *Options) *cobra.Command {
	var (
		cfg                     credentials.Config
		node, check, msg, agent string
		fatal, healthy          bool
		retry                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Send a test health event to a platform-connector",
		Example: `  callerauth publish --address unix:///var/run/nvsentinel/platform-connector.sock \
      --token-file /var/run/secrets/nvsentinel/platform-connector/token --check-name GpuXid --message "xid 79"
  callerauth publish --address connector.nvsentinel.svc:8443 --tls --ca-file ca.crt \
      --token-file token --node node-b --check-name GpuXid --fatal`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := connector.NewPublisher(cfg)
			if err != nil {
				return err
			}
			defer p.Close()
			ev := &pcv1.HealthEvent{
				Version: 1, Agent: agent, ComponentClass: "GPU", CheckName: check, IsFatal: fatal, IsHealthy: healthy,
				Message: msg, NodeName: node, GeneratedTimestamp: timestamppb.New(o.Now()),
			}
			ctx := cmd.Context()
			if retry > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, retry)
				defer cancel()
				err = p.PublishRetrying(ctx, ev)
			} else {
				err = p.Publish(ctx, ev)
			}
			if err != nil {
				return explainPublishError(cfg, err)
			}
			where := node
			if where == "" {
				where = "(blank: the connector stamps the node)"
			}
			fmt.Fprintf(o.Stdout, "event %s about node %s accepted\n", check, where)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Address, "address", "", "connector address: unix:///path.sock or host:port (required)")
	f.BoolVar(&cfg.TLS, "tls", false, "use TLS (required for a token over TCP)")
	f.StringVar(&cfg.CAFile, "ca-file", "", "CA bundle for the connector's certificate")
	f.StringVar(&cfg.ServerName, "server-name", "", "name to check the connector's certificate against")
	f.StringVar(&cfg.TokenFile, "token-file", "", "token file, re-read on every call (tokenMountPath/token)")
	f.StringVar(&node, "node", "", "node the event is about (blank: the connector fills in the caller's node)")
	f.StringVar(&check, "check-name", "CallerauthTestEvent", "check name")
	f.StringVar(&msg, "message", "test event from callerauth publish", "message")
	f.StringVar(&agent, "agent", "callerauth-publish", "agent name")
	f.BoolVar(&fatal, "fatal", false, "mark the event fatal")
	f.BoolVar(&healthy, "healthy", false, "mark the event healthy")
	f.DurationVar(&retry, "retry", 0, "keep retrying while the connector answers Unavailable, for up to this long")
	return cmd
}

// explainPublishError adds what gRPC's words leave out: a server that
// closes the connection before its HTTP/2 preface, reached over TCP without
// TLS, is almost always a TLS server.
func explainPublishError(cfg credentials.Config, err error) error {
	if !cfg.TLS && !strings.HasPrefix(cfg.Address, "unix:") && strings.Contains(err.Error(), "server preface") {
		return fmt.Errorf("%w\nthe connector at %s closed the connection before speaking gRPC in the clear: it serves TLS; pass --tls (and --ca-file with its CA)", err, cfg.Address)
	}
	return err
}
