// Command pdp is the policy decision point: POST /v1/check with caller
// authentication, Cedar policies, and signed decision records. See
// docs/pdp.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/internal/services/pdp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := pdp.Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
