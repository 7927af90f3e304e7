package authn

import (
	"context"
	"time"
)

// Layer is an authenticator with what it says of itself, stated by
// whoever builds it: the audiences its verdicts depend on, whether it can
// tell that a verdict it gave earlier no longer stands, which facts it
// never states, and — for the verdict cache — whether a verdict came from
// memory. The layer above reads these fields; nothing finds them out by
// asserting types at run time, so a wrapper that forgets to pass one on
// is visible where it is built, not a silent loss.
//
// A plain authenticator is a Layer of its own: authn.Layer{Authenticator:
// a}. The backends build theirs (kube.Authenticator.Layer,
// kube.Bound.Layer, oidc.Authenticator.Layer, oidc.Reloading.Layer), and
// so do the wrappers, which answer for what they wrap ([Recheck.Layer],
// [Cache.Layer]). callers stacks them; adding a layer is one place there.
type Layer struct {
	// Authenticator verifies tokens. Required.
	Authenticator Authenticator
	// Audiences are those its verdicts depend on (kube's required
	// audiences): the verdict cache keys on them. Nil: none.
	Audiences []string
	// Revoked, when set, says on every verdict-cache hit whether a verdict
	// for c, reached by a verification that began at verified, still
	// stands: nil when it does; an error wrapping [ErrReverify] when the
	// layer cannot vouch for it any more and the token must be verified
	// again (the cache drops it and asks); any other error is the refusal,
	// cached as one. Cheap and with no call out of the process
	// (kube.Bound: the pod its token is bound to was deleted), so that a
	// revocation takes effect as soon as the layer knows of it rather than
	// when the cached verdict expires. Nil: verdicts stand until they
	// expire.
	Revoked func(c *Caller, verified time.Time) error
	// Lacks, when set, says why f is a fact the layer never states
	// (naming the backend), or "" when it may state it: a rule that reads
	// one (binding.Roles reads the roles; with RequireTenant, the tenant)
	// is refused over a layer that never states it. Nil: every fact may
	// be stated.
	Lacks func(f Fact) string
	// cache is set in the verdict cache's layer ([Cache.Layer]): its
	// verdicts say whether they came from memory, the one way the guard
	// learns of a hit, for its metrics and logs.
	cache *Cache
}

// Cached reports whether the layer is a verdict cache's ([Cache.Layer]),
// whose verdicts may come from memory.
func (l *Layer) Cached() bool { return l.cache != nil }

// Verify authenticates token through the layer, saying whether the
// verdict came from memory (only a verdict cache's layer's may).
func (l *Layer) Verify(ctx context.Context, token string) (caller *Caller, hit bool, err error) {
	if l.cache != nil {
		return l.cache.AuthenticateCached(ctx, token)
	}
	caller, err = l.Authenticator.Authenticate(ctx, token)
	return caller, false, err
}

// Lacking is what the layer says of f: "" unless its Lacks says it never
// states f.
func (l *Layer) Lacking(f Fact) string {
	if l.Lacks == nil {
		return ""
	}
	return l.Lacks(f)
}

// LacksEither is the Lacks of a layer that answers from two (Recheck,
// kube.Bound: offline, or TokenReview): a fact either never states is
// missing from some verdicts.
func LacksEither(a, b Layer) func(Fact) string {
	if a.Lacks == nil && b.Lacks == nil {
		return nil
	}
	return func(f Fact) string {
		if why := a.Lacking(f); why != "" {
			return why
		}
		return b.Lacking(f)
	}
}

// Fact is something about a caller only some backends state: a rule that
// reads one (binding.Roles reads the roles; with RequireTenant, the
// tenant) never passes over a backend that never states it.
type Fact string

// Facts a backend may or may not state.
const (
	// FactRoles is Caller.Roles.
	FactRoles Fact = "roles"
	// FactTenant is Caller.Tenant.
	FactTenant Fact = "tenant"
)
