// Command vmafx-operator reconciles VmafxJobs against the vmafx controller.
// See docs/vmafx.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/internal/services/vmafx/operator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := operator.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
