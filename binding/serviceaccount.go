package binding

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ServiceAccountPrefix starts every Kubernetes service-account username.
const ServiceAccountPrefix = "system:serviceaccount:"

var saUsername = regexp.MustCompile(`^system:serviceaccount:([^:]*):([^:]*)$`)

// ValidateServiceAccountUsername checks the canonical form a cross-node
// entry must have to ever equal a TokenReview username:
// system:serviceaccount:<namespace>:<name>, the namespace a DNS-1123 label
// (≤ 63), the name a DNS-1123 subdomain (≤ 253), no whitespace, no
// uppercase. Nothing is trimmed or normalised.
func ValidateServiceAccountUsername(u string) error {
	if strings.ContainsFunc(u, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' }) {
		return errors.New("contains whitespace; entries are matched verbatim and never trimmed")
	}
	if strings.ToLower(u) != u {
		return errors.New("contains uppercase; a service-account username never does")
	}
	m := saUsername.FindStringSubmatch(u)
	if m == nil {
		return errors.New("want system:serviceaccount:<namespace>:<name>")
	}
	if msgs := validation.IsDNS1123Label(m[1]); len(msgs) > 0 {
		return fmt.Errorf("namespace %q: %s", m[1], msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(m[2]); len(msgs) > 0 {
		return fmt.Errorf("name %q: %s", m[2], msgs[0])
	}
	return nil
}
