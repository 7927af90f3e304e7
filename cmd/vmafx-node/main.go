// Command vmafx-node claims vmafx jobs from the controller, measures them
// and reports the scores. See docs/vmafx.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/internal/services/vmafx/node"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := node.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
