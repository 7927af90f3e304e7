// Command callerauth-proxy is the callerauth guard in front of one
// upstream service of any language. See docs/proxy.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/internal/services/proxy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := proxy.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
