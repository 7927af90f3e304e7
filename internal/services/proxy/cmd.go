package proxy

import (
	"context"
	"io"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"

	"github.com/spf13/cobra"

	"github.com/callerauth/callerauth/internal/serve"
)

// NewCommand is the callerauth-proxy command line.
func NewCommand(stderr io.Writer) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "callerauth-proxy",
		Short: "The callerauth guard in front of one upstream service of any language",
		Long: `callerauth-proxy verifies each request's bearer token for --caller-audience
(TokenReview with the verdict cache, an AuthenticationConfiguration, or the
bound-object watch), lets through the callers --allow-service-account,
--allow-group and --allow-user name, and passes the request to --upstream
(HTTP/1.1 or HTTP/2; gRPC and streams pass through) with the caller's
identity in X-Remote-User, X-Remote-Group and X-Remote-Extra-* and its
token removed. See docs/proxy.md.`,
	}
	serve.Command(cmd, &o.Serve, stderr, serve.Complete(&o, New))
	o.AddFlags(cmd.Flags())
	return cmd
}

// ParseArgs reads a command line as callerauth-proxy does, without
// running it (what a chart renders).
func ParseArgs(args []string) (Options, error) {
	o := NewOptions()
	if err := serve.ParseArgs("callerauth-proxy", o.AddFlags, args); err != nil {
		return Options{}, err
	}
	return o, nil
}

// DefaultGCPercent is the collector's target while $GOGC is unset: the
// heap may grow to three times what is live before a collection, not
// twice. The proxy's live heap is small (2–3 MB, most of it the linked
// Kubernetes packages' tables made at start-up) and each request
// allocates about 11 KB, so at Go's default the collector ran every few
// milliseconds under load and marked those tables each time: a quarter
// more CPU a request than a bare ReverseProxy, measured
// (docs/performance.md). At 200 it costs a few MB of memory.
const DefaultGCPercent = 200

// Main runs the command and returns the exit code.
func Main(ctx context.Context, args []string) int {
	setGCPercent()
	return serve.Execute(ctx, NewCommand(os.Stderr), args, os.Stderr)
}

// setGCPercent sets DefaultGCPercent unless $GOGC says otherwise, and
// returns the target in force.
func setGCPercent() int {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
	return gcPercent()
}

// gcPercent is the collector's target in force (the start-up line says it).
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 {
		return -1 // off (GOGC=off reads as the largest value)
	}
	return int(v)
}
