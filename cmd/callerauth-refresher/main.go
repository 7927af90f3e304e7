// Command callerauth-refresher is the token-refresher sidecar: it keeps a
// token file current from an identity provider's OAuth2 client-credentials
// grant, and links nothing else of callerauth. See docs/vmafx.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/internal/services/refresher"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := refresher.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
