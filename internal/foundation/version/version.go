// Package version says which build is running: the module version, the
// VCS revision and whether the tree was modified, and the Go version, from
// the build information the Go toolchain embeds in every binary.
package version

import (
	"fmt"
	"runtime/debug"
)

// Info is what a binary knows of its build.
type Info struct {
	// Version is the main module's version: a tag (v0.4.0), a pseudo-version
	// for an untagged commit, or "(devel)" for a build from a working tree.
	Version string
	// Revision is the VCS commit ("unknown" when the build did not stamp
	// it, as with -buildvcs=false), Dirty whether the tree had changes.
	Revision string
	Dirty    bool
	// Go is the toolchain that built it.
	Go string
}

// Get reads the running binary's build information.
func Get() Info {
	i := Info{Version: "(devel)", Revision: "unknown", Go: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	i.Go = bi.GoVersion
	if v := bi.Main.Version; v != "" {
		i.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Dirty = s.Value == "true"
		}
	}
	return i
}

// String is the one line every binary prints for --version and logs at
// start-up: "v0.4.0 (revision 1a2b3c…, dirty) go1.26.8".
func (i Info) String() string {
	dirty := ""
	if i.Dirty {
		dirty = ", dirty"
	}
	return fmt.Sprintf("%s (revision %s%s) %s", i.Version, i.Revision, dirty, i.Go)
}
