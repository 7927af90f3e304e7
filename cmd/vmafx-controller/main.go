// Command vmafx-controller serves the vmafx JobService: quality-measurement
// jobs, per-tenant identity providers, roles and tenant scoping. See
// docs/vmafx.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/internal/services/vmafx/controller"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := controller.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
