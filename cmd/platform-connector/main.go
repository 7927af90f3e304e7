// Command platform-connector receives health events over gRPC with
// node-binding authentication. See docs/platform-connector.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/internal/services/connector"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := connector.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
