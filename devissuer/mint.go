package devissuer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Claims is the payload of a Kubernetes service-account token, as the API
// server writes it.
type Claims struct {
	Issuer     string           `json:"iss"`
	Subject    string           `json:"sub"`
	Audience   jwt.Audience     `json:"aud"`
	Expiry     *jwt.NumericDate `json:"exp"`
	IssuedAt   *jwt.NumericDate `json:"iat"`
	NotBefore  *jwt.NumericDate `json:"nbf"`
	ID         string           `json:"jti"`
	Kubernetes KubernetesClaims `json:"kubernetes.io"`
}

// KubernetesClaims is the kubernetes.io claim.
type KubernetesClaims struct {
	Namespace      string     `json:"namespace"`
	ServiceAccount ObjectRef  `json:"serviceaccount"`
	Pod            *ObjectRef `json:"pod,omitempty"`
	Node           *ObjectRef `json:"node,omitempty"`
}

// ObjectRef names an object and its UID.
type ObjectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// TokenRequest asks for one token.
type TokenRequest struct {
	// Namespace and ServiceAccount name the identity. Required.
	Namespace      string
	ServiceAccount string
	// Audiences the token is for. At least one is required.
	Audiences []string
	// Lifetime of the token. Default 1h. At least 600 s, a whole number of
	// seconds, at most the issuer's maximum.
	Lifetime time.Duration
	// Pod binds the token to a pod in Namespace. The pod is created in the
	// registry if it does not exist; a token for an existing pod carries the
	// pod's node.
	Pod string
	// Node is the node the pod runs on (the pod is scheduled there), or,
	// without Pod, the node the token is bound to. A pod without a node is
	// an unscheduled pod: its tokens carry no node claim.
	Node string
	// IssuedAt backdates or postdates the token, for tests of expired and
	// not-yet-valid tokens. Default: now.
	IssuedAt time.Time
	// ID sets the jti, for tests of what a known jti can do (jtis are not
	// secret: decision records carry them). Default: a fresh UUID.
	ID string
}

// Token is a minted token and its facts.
type Token struct {
	Token  string
	Claims Claims
}

// DefaultLifetime is the lifetime of a token when the request names none,
// the kubelet's default for projected tokens.
const DefaultLifetime = time.Hour

// Mint signs a service-account token under the TokenRequest rules.
func (i *Issuer) Mint(req TokenRequest) (Token, error) {
	if err := i.checkRequest(&req); err != nil {
		return Token{}, err
	}
	var saUID string
	var podRef, nodeRef *ObjectRef
	err := i.updateRegistry(func(r *registry) error {
		saKey := req.Namespace + "/" + req.ServiceAccount
		if saUID = r.ServiceAccounts[saKey]; saUID == "" {
			saUID = newUID()
			r.ServiceAccounts[saKey] = saUID
		}
		node := req.Node
		if req.Pod != "" {
			podKey := req.Namespace + "/" + req.Pod
			p, ok := r.Pods[podKey]
			switch {
			case !ok:
				p = pod{UID: newUID(), Node: node}
				r.Pods[podKey] = p
			case node != "" && p.Node != node:
				where := "is not scheduled"
				if p.Node != "" {
					where = "runs on node " + p.Node
				}
				return fmt.Errorf("devissuer: pod %s %s, not on node %s; delete it first to recreate it", podKey, where, node)
			}
			podRef = &ObjectRef{Name: req.Pod, UID: p.UID}
			node = p.Node
		}
		if node != "" {
			uid := r.Nodes[node]
			if uid == "" {
				uid = newUID()
				r.Nodes[node] = uid
			}
			nodeRef = &ObjectRef{Name: node, UID: uid}
		}
		return nil
	})
	if err != nil {
		return Token{}, err
	}
	iat := req.IssuedAt
	if iat.IsZero() {
		iat = i.now()
	}
	iat = iat.Truncate(time.Second)
	c := Claims{
		Issuer:    i.issuer,
		Subject:   "system:serviceaccount:" + req.Namespace + ":" + req.ServiceAccount,
		Audience:  jwt.Audience(req.Audiences),
		IssuedAt:  jwt.NewNumericDate(iat),
		NotBefore: jwt.NewNumericDate(iat),
		Expiry:    jwt.NewNumericDate(iat.Add(req.Lifetime)),
		ID:        cmp.Or(req.ID, newUID()),
		Kubernetes: KubernetesClaims{
			Namespace:      req.Namespace,
			ServiceAccount: ObjectRef{Name: req.ServiceAccount, UID: saUID},
			Pod:            podRef,
			Node:           nodeRef,
		},
	}
	signer, _ := i.signing()
	tok, err := jwt.Signed(signer).Claims(c).Serialize()
	if err != nil {
		return Token{}, fmt.Errorf("devissuer: signing: %w", err)
	}
	return Token{Token: tok, Claims: c}, nil
}

func (i *Issuer) checkRequest(req *TokenRequest) error {
	var errs []error
	if msgs := validation.IsDNS1123Label(req.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("devissuer: namespace %q: %s", req.Namespace, msgs[0]))
	}
	if msgs := validation.IsDNS1123Subdomain(req.ServiceAccount); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("devissuer: service account %q: %s", req.ServiceAccount, msgs[0]))
	}
	if req.Pod != "" {
		if msgs := validation.IsDNS1123Subdomain(req.Pod); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("devissuer: pod %q: %s", req.Pod, msgs[0]))
		}
	}
	if req.Node != "" {
		if msgs := validation.IsDNS1123Subdomain(req.Node); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("devissuer: node %q: %s", req.Node, msgs[0]))
		}
	}
	if len(req.Audiences) == 0 {
		errs = append(errs, errors.New("devissuer: at least one audience is required"))
	}
	for _, a := range req.Audiences {
		if a == "" {
			errs = append(errs, errors.New("devissuer: an audience may not be empty"))
		}
	}
	if req.Lifetime == 0 {
		req.Lifetime = DefaultLifetime
	}
	switch {
	case req.Lifetime%time.Second != 0:
		errs = append(errs, fmt.Errorf("devissuer: lifetime %s is not a whole number of seconds", req.Lifetime))
	case req.Lifetime < MinLifetime:
		errs = append(errs, fmt.Errorf("devissuer: lifetime %s: may not specify a duration less than 10 minutes", req.Lifetime))
	case req.Lifetime > i.maxLifetime:
		errs = append(errs, fmt.Errorf("devissuer: lifetime %s exceeds this issuer's maximum %s", req.Lifetime, i.maxLifetime))
	}
	return errors.Join(errs...)
}

// IdentityRequest asks for a token as a tenant's identity provider issues
// one: any subject, any audiences, extra claims (a scope, a tenant).
type IdentityRequest struct {
	// Subject is the sub claim. Required.
	Subject string
	// Audiences the token is for. At least one is required.
	Audiences []string
	// Lifetime of the token. Default 1h; at most the issuer's maximum.
	Lifetime time.Duration
	// Claims are added to the payload: {"scp": "vmafx:reader vmafx:submitter"}.
	// They may not replace a registered claim (iss, sub, aud, exp, nbf, iat,
	// jti).
	Claims map[string]any
	// IssuedAt backdates or postdates the token. Default: now.
	IssuedAt time.Time
}

// registered are the claims MintIdentity sets itself.
var registered = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti"}

// MintIdentity signs a tenant identity provider's token.
func (i *Issuer) MintIdentity(req IdentityRequest) (Token, error) {
	var errs []error
	if req.Subject == "" {
		errs = append(errs, errors.New("devissuer: a subject is required"))
	}
	if len(req.Audiences) == 0 || slices.Contains(req.Audiences, "") {
		errs = append(errs, errors.New("devissuer: at least one non-empty audience is required"))
	}
	if req.Lifetime == 0 {
		req.Lifetime = DefaultLifetime
	}
	if req.Lifetime < time.Second || req.Lifetime > i.maxLifetime {
		errs = append(errs, fmt.Errorf("devissuer: lifetime %s: want 1s to %s", req.Lifetime, i.maxLifetime))
	}
	for k := range req.Claims {
		if slices.Contains(registered, k) {
			errs = append(errs, fmt.Errorf("devissuer: claim %q is set by the issuer", k))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Token{}, err
	}
	iat := req.IssuedAt
	if iat.IsZero() {
		iat = i.now()
	}
	iat = iat.Truncate(time.Second)
	c := Claims{Issuer: i.issuer, Subject: req.Subject, Audience: jwt.Audience(req.Audiences),
		IssuedAt: jwt.NewNumericDate(iat), NotBefore: jwt.NewNumericDate(iat), Expiry: jwt.NewNumericDate(iat.Add(req.Lifetime)), ID: newUID()}
	registeredClaims := jwt.Claims{Issuer: c.Issuer, Subject: c.Subject, Audience: c.Audience, IssuedAt: c.IssuedAt, NotBefore: c.NotBefore, Expiry: c.Expiry, ID: c.ID}
	signer, _ := i.signing()
	b := jwt.Signed(signer).Claims(registeredClaims)
	if len(req.Claims) > 0 {
		b = b.Claims(req.Claims)
	}
	tok, err := b.Serialize()
	if err != nil {
		return Token{}, fmt.Errorf("devissuer: signing: %w", err)
	}
	return Token{Token: tok, Claims: c}, nil
}
