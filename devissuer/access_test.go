package devissuer_test

import (
	"errors"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"

	"github.com/callerauth/callerauth/devissuer"
)

func TestAccess(t *testing.T) {
	iss := open(t, t.TempDir(), devissuer.Config{})
	for _, bad := range []devissuer.AccessGrant{
		{Verb: "get", NonResourceURL: "/metrics"},
		{User: "u", Group: "g", Verb: "get", NonResourceURL: "/metrics"},
		{User: "u", NonResourceURL: "/metrics"},
		{User: "u", Verb: "get"},
		{User: "u", Verb: "get", NonResourceURL: "metrics"},
		{User: "u", Verb: "get", NonResourceURL: "/metrics", Namespace: "n"},
	} {
		if err := iss.Grant(bad); err == nil {
			t.Errorf("Grant(%+v) accepted", bad)
		}
	}
	grants := []devissuer.AccessGrant{
		{User: "alice", Verb: "get", NonResourceURL: "/metrics"},
		{Group: "ops", Verb: "*", NonResourceURL: "/debug/*"},
		{User: "bob", Verb: "get", Resource: "services", Subresource: "proxy", Namespace: "default"},
	}
	for _, g := range grants {
		if err := iss.Grant(g); err != nil {
			t.Fatal(err)
		}
	}
	nr := func(user, verb, path string, groups ...string) authzv1.SubjectAccessReviewSpec {
		return authzv1.SubjectAccessReviewSpec{User: user, Groups: groups, NonResourceAttributes: &authzv1.NonResourceAttributes{Verb: verb, Path: path}}
	}
	res := func(user, verb, ns, resource, sub string) authzv1.SubjectAccessReviewSpec {
		return authzv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Namespace: ns, Resource: resource, Subresource: sub}}
	}
	for _, c := range []struct {
		spec authzv1.SubjectAccessReviewSpec
		want bool
	}{
		{nr("alice", "get", "/metrics"), true},
		{nr("alice", "create", "/metrics"), false},
		{nr("alice", "get", "/metrics/x"), false},
		{nr("carol", "delete", "/debug/pprof", "ops"), true},
		{nr("carol", "get", "/debugger", "ops"), false},
		{nr("carol", "get", "/debug/x"), false},
		{res("bob", "get", "default", "services", "proxy"), true},
		{res("bob", "get", "kube-system", "services", "proxy"), false},
		{res("bob", "get", "default", "services", ""), false},
		{res("alice", "get", "default", "services", "proxy"), false},
	} {
		st, err := iss.Access(c.spec)
		if err != nil || st.Allowed != c.want {
			t.Errorf("%+v %+v %+v: %+v %v, want allowed=%v", c.spec.User, c.spec.NonResourceAttributes, c.spec.ResourceAttributes, st, err, c.want)
		}
	}
	if err := iss.Revoke(grants[0]); err != nil {
		t.Fatal(err)
	}
	if st, _ := iss.Access(nr("alice", "get", "/metrics")); st.Allowed {
		t.Error("a revoked grant still allows")
	}
	if err := iss.Revoke(grants[0]); !errors.Is(err, devissuer.ErrNoSuchGrant) || !strings.Contains(err.Error(), "alice") {
		t.Errorf("revoking twice: %v", err)
	}
}
