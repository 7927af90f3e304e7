// Command callerauth runs the embedded dev issuer, mints and inspects
// service-account tokens, and runs the demo. See `callerauth --help`.
package main

import (
	"os"

	"github.com/callerauth/callerauth/internal/demo"
	"github.com/callerauth/callerauth/internal/services/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], demo.NewCommand)) }
