package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Lookup resolves a host name to addresses; net.DefaultResolver.LookupHost
// unless a test replaces it.
type Lookup func(ctx context.Context, host string) ([]string, error)

func newDoctorCmd(o *Options) *cobra.Command {
	cmd := &cobra.Command{Use: "doctor", Short: "Check the surroundings a caller depends on"}
	cmd.AddCommand(newDoctorDNSCmd(o))
	return cmd
}

func newDoctorDNSCmd(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "dns NAME",
		Short: "Tell whether NAME resolves because of a wildcard search suffix",
		Long: `dns resolves NAME and a random sibling name under the same parent. If the
sibling — a service that cannot exist — resolves too, to the same addresses,
the resolver is expanding a search suffix that answers wildcard, and NAME's
answer is not a record of NAME: a request sent there (with its bearer token)
goes to an unrelated host. Publish and use the trailing-dot FQDN
("name.ns.svc.cluster.local."), which fails to resolve instead of resolving
to the wrong place. The exit status is non-zero when the hazard is found.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lookup := o.Lookup
			if lookup == nil {
				lookup = net.DefaultResolver.LookupHost
			}
			return doctorDNS(cmd.Context(), o.Stdout, lookup, args[0])
		},
	}
}

// ErrWildcard is returned when a name resolves only through a wildcard.
var ErrWildcard = errors.New("doctor: the name resolves through a wildcard search suffix")

func doctorDNS(ctx context.Context, w io.Writer, lookup Lookup, name string) error {
	if _, err := netip.ParseAddr(strings.Trim(name, "[].")); err == nil {
		return fmt.Errorf("doctor: %q is an IP address, not a DNS name: no search suffix expands it, so there is nothing to probe; give the name the client is configured with", name)
	}
	absolute := strings.HasSuffix(name, ".")
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	if len(labels) < 2 {
		return fmt.Errorf("doctor: %q has no parent domain to probe a sibling under", name)
	}
	raw := make([]byte, 6)
	_, _ = rand.Read(raw)
	labels[0] = "callerauth-probe-" + hex.EncodeToString(raw)
	sibling := strings.Join(labels, ".")
	if absolute {
		sibling += "."
	}
	addrs, err := lookup(ctx, name)
	if err != nil {
		fmt.Fprintf(w, "%s: does not resolve (%v)\n", name, err)
		if absolute {
			fmt.Fprintln(w, "the trailing-dot name fails closed here: nothing answers in its place")
		}
		return nil
	}
	slices.Sort(addrs)
	fmt.Fprintf(w, "%s: %s\n", name, strings.Join(addrs, ", "))
	sib, serr := lookup(ctx, sibling)
	if serr != nil {
		fmt.Fprintf(w, "%s (a name that cannot exist): does not resolve — good, %s is a real record\n", sibling, name)
		return nil
	}
	slices.Sort(sib)
	fmt.Fprintf(w, "%s (a name that cannot exist): %s\n", sibling, strings.Join(sib, ", "))
	same := slices.Equal(addrs, sib)
	if same {
		fmt.Fprintf(w, "\nHAZARD: a name that cannot exist resolves to the same addresses: the resolver is expanding a search suffix that answers wildcard.\n"+
			"A request to %s — with its bearer token — would go to an unrelated host.\n"+
			"Use the trailing-dot FQDN %q (in-cluster only): it fails to resolve instead of resolving to the wrong place.\n", name, strings.TrimSuffix(name, ".")+".")
	} else {
		fmt.Fprintf(w, "\nWARNING: a name that cannot exist resolves (to other addresses): something answers wildcard under %s.\n", strings.Join(labels[1:], "."))
	}
	return ErrWildcard
}
