// Command images runs make images: one OCI image per callerauth binary,
// written as an OCI image layout, a docker load tarball and an SPDX SBOM
// each, with no registry and no daemon (docs/deploy.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/callerauth/callerauth/internal/tools/images"
)

func main() {
	o := images.Options{Log: os.Stderr}
	flag.StringVar(&o.Root, "root", ".", "the module's root directory")
	flag.StringVar(&o.Out, "out", "dist/images", "the output directory")
	flag.StringVar(&o.Registry, "registry", "ghcr.io/callerauth", "the repository prefix: <registry>/<binary>:<tag>")
	flag.StringVar(&o.Tag, "tag", "", "every image's tag (required; make images passes the VERSION file's)")
	platforms := flag.String("platforms", "", "comma-separated linux/<arch> list (default: this machine's)")
	binaries := flag.String("binaries", "", "comma-separated binaries to build (default: "+strings.Join(images.Binaries, ",")+")")
	flag.StringVar(&o.BuildVCS, "buildvcs", "auto", "go build -buildvcs")
	flag.Parse()
	if *platforms != "" {
		o.Platforms = strings.Split(*platforms, ",")
	}
	if *binaries != "" {
		o.Binaries = strings.Split(*binaries, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	built, err := images.Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, im := range built {
		fmt.Printf("%s %s\n", im.Ref, im.Digest)
	}
}
