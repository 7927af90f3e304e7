package connector

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// newHostDirsCommand is platform-connector host-dirs: the socket role's
// init container. The kubelet creates a DirectoryOrCreate hostPath owned
// by root with mode 0755, where the connector, running as a non-root user,
// could create neither its socket nor its datastore; this gives each
// directory to that user, and nothing else: no recursion, no symbolic
// link followed, only a directory. It needs root and CAP_CHOWN, the one
// exception to Pod Security "restricted" in the chart
// (docs/deploy.md#the-socket-role).
func newHostDirsCommand(stdout io.Writer) *cobra.Command {
	var owner string
	var mode uint32
	cmd := &cobra.Command{
		Use:   "host-dirs DIR...",
		Short: "Give the socket role's host directories to the connector's user (the DaemonSet's init container)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, dirs []string) error {
			uid, gid, err := parseOwner(owner)
			if err != nil {
				return fmt.Errorf("--owner %q: %w", owner, err)
			}
			if mode&^0o7777 != 0 {
				return fmt.Errorf("--mode %o: want permission bits", mode)
			}
			for _, d := range dirs {
				fi, err := os.Lstat(d)
				if err != nil {
					return err
				}
				if !fi.IsDir() {
					return fmt.Errorf("%s: not a directory (%s)", d, fi.Mode().Type())
				}
				want := os.FileMode(mode&0o777) | modeBits(mode)
				st, _ := fi.Sys().(*syscall.Stat_t)
				if st != nil && int(st.Uid) == uid && int(st.Gid) == gid && fi.Mode()&(os.ModePerm|os.ModeSetgid|os.ModeSticky|os.ModeSetuid) == want {
					// Every start of the pod after the first: nothing to do
					// (and chmod, no longer root's file, would need
					// CAP_FOWNER, which this container does not have).
					fmt.Fprintf(stdout, "%s: owner %d:%d, mode %04o already\n", d, uid, gid, mode)
					continue
				}
				// The mode needs the owner (or CAP_FOWNER): a directory
				// given away before, to another owner or with another mode,
				// is taken back first (CAP_CHOWN), then the mode set and the
				// owner given.
				if st != nil && int(st.Uid) != os.Geteuid() {
					if err := os.Lchown(d, os.Geteuid(), -1); err != nil {
						return err
					}
				}
				if err := os.Chmod(d, want); err != nil {
					return err
				}
				if err := os.Lchown(d, uid, gid); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "%s: owner %d:%d, mode %04o\n", d, uid, gid, mode)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&owner, "owner", "65532:65532", "uid:gid the directories are given to (the connector's runAsUser:runAsGroup)")
	cmd.Flags().Uint32Var(&mode, "mode", 0o750, "the directories' permission bits, octal")
	return cmd
}

// modeBits carries the set-id and sticky bits of an octal mode into an
// os.FileMode.
func modeBits(m uint32) os.FileMode {
	var out os.FileMode
	if m&syscall.S_ISGID != 0 {
		out |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		out |= os.ModeSticky
	}
	return out
}

func parseOwner(s string) (int, int, error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("want uid:gid")
	}
	uid, err := strconv.ParseUint(u, 10, 31)
	if err != nil {
		return 0, 0, err
	}
	gid, err := strconv.ParseUint(g, 10, 31)
	if err != nil {
		return 0, 0, err
	}
	return int(uid), int(gid), nil
}
