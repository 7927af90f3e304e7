package devissuer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authv1 "k8s.io/api/authentication/v1"

	"github.com/callerauth/callerauth/authn"
)

// Review answers a TokenReview as the API server would: the token must be
// signed by this issuer's key, name this issuer, be within its lifetime
// (with the configured leeway), share at least one audience with the
// requested ones (the API audiences when none are requested), and, when
// bound, its pod (or node) must still exist with the same UID. The status
// carries the user, the audiences that matched, or an error saying why.
func (i *Issuer) Review(tok string, audiences []string) authv1.TokenReviewStatus {
	if len(audiences) == 0 {
		audiences = i.apiAudiences
	}
	c, matched, err := i.verify(tok, audiences)
	if err != nil {
		return authv1.TokenReviewStatus{Error: "[invalid bearer token, " + err.Error() + "]"}
	}
	extra := map[string]authv1.ExtraValue{authn.ExtraCredentialID: {"JTI=" + c.ID}}
	if p := c.Kubernetes.Pod; p != nil {
		extra[authn.ExtraPodName] = authv1.ExtraValue{p.Name}
		extra[authn.ExtraPodUID] = authv1.ExtraValue{p.UID}
	}
	if n := c.Kubernetes.Node; n != nil {
		extra[authn.ExtraNodeName] = authv1.ExtraValue{n.Name}
		extra[authn.ExtraNodeUID] = authv1.ExtraValue{n.UID}
	}
	ns := c.Kubernetes.Namespace
	return authv1.TokenReviewStatus{
		Authenticated: true,
		User: authv1.UserInfo{
			Username: c.Subject,
			UID:      c.Kubernetes.ServiceAccount.UID,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			Extra:    extra,
		},
		Audiences: matched,
	}
}

var errNotJWT = errors.New("token is not a JWT")

func (i *Issuer) verify(tok string, audiences []string) (*Claims, []string, error) {
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256, jose.RS256})
	if err != nil {
		return nil, nil, errNotJWT
	}
	// A token from another issuer is not this issuer's to judge.
	var unverified Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, nil, errNotJWT
	}
	if unverified.Issuer != i.issuer {
		return nil, nil, fmt.Errorf("token issuer %q is not %q", unverified.Issuer, i.issuer)
	}
	// Two dev issuers share the default issuer name, so a token minted
	// with another --state-dir gets this far: say which key signed it.
	kid := parsed.Headers[0].KeyID
	pub, ok := i.verificationKey(kid)
	if !ok {
		return nil, nil, fmt.Errorf("token is signed by a key this validator does not know: kid %q (this issuer signs with kid %q; was it minted with another --state-dir?)", kid, i.KeyID())
	}
	var c Claims
	if err := parsed.Claims(pub, &c); err != nil {
		return nil, nil, fmt.Errorf("token signature does not verify with this issuer's key (kid %q)", kid)
	}
	now := i.now()
	std := jwt.Claims{Expiry: c.Expiry, NotBefore: c.NotBefore, IssuedAt: c.IssuedAt}
	switch err := std.ValidateWithLeeway(jwt.Expected{Time: now}, i.leeway); {
	case errors.Is(err, jwt.ErrExpired):
		return nil, nil, errors.New("service account token has expired")
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, nil, errors.New("service account token is not valid yet")
	case err != nil:
		return nil, nil, fmt.Errorf("service account token is invalid: %w", err)
	}
	if c.Expiry == nil {
		return nil, nil, errors.New("service account token has no expiry")
	}
	var matched []string
	for _, a := range audiences {
		if slices.Contains(c.Audience, a) {
			matched = append(matched, a)
		}
	}
	if len(matched) == 0 {
		return nil, nil, fmt.Errorf("token audiences %s is invalid for the target audiences %s", quoteList(c.Audience), quoteList(audiences))
	}
	if err := i.checkBinding(&c); err != nil {
		return nil, nil, err
	}
	return &c, matched, nil
}

// checkBinding refuses a token whose pod or node no longer exists with the
// UID the token names.
func (i *Issuer) checkBinding(c *Claims) error {
	k := c.Kubernetes
	if k.Pod == nil && k.Node == nil {
		return nil
	}
	r, err := i.readRegistry()
	if err != nil {
		return err
	}
	if k.Pod != nil {
		if p, ok := r.Pods[k.Namespace+"/"+k.Pod.Name]; !ok || p.UID != k.Pod.UID {
			return errors.New("service account token has been invalidated")
		}
	}
	if k.Node != nil {
		if uid, ok := r.Nodes[k.Node.Name]; !ok || uid != k.Node.UID {
			return errors.New("service account token has been invalidated")
		}
	}
	return nil
}

func quoteList(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ErrNoSuchPod is returned by DeletePod for a pod the issuer does not know.
var ErrNoSuchPod = errors.New("devissuer: no such pod")

// DeletePod deletes a pod from the registry, as deleting it from the API
// server would: tokens bound to it stop reviewing as authenticated. A pod
// created again under the same name gets a new UID, so old tokens stay
// refused.
func (i *Issuer) DeletePod(namespace, name string) error {
	return i.updateRegistry(func(r *registry) error {
		k := namespace + "/" + name
		if _, ok := r.Pods[k]; !ok {
			return fmt.Errorf("%w: %s", ErrNoSuchPod, k)
		}
		delete(r.Pods, k)
		return nil
	})
}

// Pods lists the pods the registry knows, as "namespace/name" → node ("" for
// an unscheduled pod).
func (i *Issuer) Pods() (map[string]string, error) {
	r, err := i.readRegistry()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(r.Pods))
	for k, p := range r.Pods {
		out[k] = p.Node
	}
	return out, nil
}
