package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
)

// TestAuthzFileExamples reads kube-rbac-proxy's example files as they are
// and checks the attributes each makes of a request, as kube-rbac-proxy
// makes them.
func TestAuthzFileExamples(t *testing.T) {
	get := func(t *testing.T, name string) attributesPolicy {
		t.Helper()
		p, err := readAuthzFile(filepath.Join("testdata", "kube-rbac-proxy", name, "config-file.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("no file: the path, a non-resource URL", func(t *testing.T) {
		specs, err := attributesPolicy{}.attributes("GET", "/metrics", nil)
		if err != nil || len(specs) != 1 || *specs[0].NonResourceAttributes != (authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}) {
			t.Fatalf("%+v %v", specs, err)
		}
	})
	t.Run("resource-attributes", func(t *testing.T) {
		specs, err := get(t, "resource-attributes").attributes("POST", "/metrics", []string{"ignored"})
		want := authzv1.ResourceAttributes{Verb: "create", Namespace: "default", Version: "v1", Resource: "services", Subresource: "proxy", Name: "kube-rbac-proxy"}
		if err != nil || len(specs) != 1 || *specs[0].ResourceAttributes != want {
			t.Fatalf("%+v %v", specs, err)
		}
	})
	t.Run("rewrites: one review per value", func(t *testing.T) {
		p := get(t, "rewrites")
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/metrics", RawQuery: "namespace=a&namespace=b"}, Header: http.Header{}}
		specs, err := p.attributes(r.Method, r.URL.Path, p.rewriteValues(r))
		if err != nil || len(specs) != 2 || specs[0].ResourceAttributes.Namespace != "a" || specs[1].ResourceAttributes.Namespace != "b" ||
			specs[1].ResourceAttributes.Resource != "namespace" || specs[1].ResourceAttributes.Subresource != "metrics" || specs[1].ResourceAttributes.Verb != "get" {
			t.Fatalf("%+v %v", specs, err)
		}
		if _, err := p.attributes("GET", "/metrics", nil); !errors.Is(err, errNoRewriteValue) {
			t.Errorf("no value: %v, want %v", err, errNoRewriteValue)
		}
		many := strings.Split(strings.Repeat("x,", MaxRewriteValues+1), ",")[:MaxRewriteValues+1]
		if _, err := p.attributes("GET", "/metrics", many); err == nil || !strings.Contains(err.Error(), "at most") {
			t.Errorf("%d values: %v", len(many), err)
		}
	})
	t.Run("static-auth: matched without a review", func(t *testing.T) {
		p := get(t, "static-auth")
		specs, err := p.attributes("GET", "/metrics", []string{"kube-system"})
		if err != nil || !p.staticAllows("anyone", specs[0]) {
			t.Fatalf("the static entry does not allow %+v (%v)", specs, err)
		}
		if !p.staticAllows("anyone", authzv1.SubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{Verb: "delete", Resource: "namespace", Subresource: "metrics"}}) {
			t.Error("an entry naming no verb matches every verb (as kube-rbac-proxy)")
		}
		if p.staticAllows("anyone", authzv1.SubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "pods"}}) {
			t.Error("the static entry allows another resource")
		}
		if p.staticAllows("anyone", authzv1.SubjectAccessReviewSpec{NonResourceAttributes: &authzv1.NonResourceAttributes{Verb: "get", Path: "/metrics"}}) {
			t.Error("a resource entry allows a non-resource request")
		}
	})
}

func TestAuthzFileStatic(t *testing.T) {
	p, err := parseAuthzFile([]byte(`
authorization:
  static:
  - user: {name: "system:serviceaccount:mon:prometheus", groups: ["ignored"]}
    verb: get
    path: /metrics
`))
	if err != nil {
		t.Fatal(err)
	}
	nr := func(verb, path string) authzv1.SubjectAccessReviewSpec {
		return authzv1.SubjectAccessReviewSpec{NonResourceAttributes: &authzv1.NonResourceAttributes{Verb: verb, Path: path}}
	}
	for _, c := range []struct {
		user, verb, path string
		want             bool
	}{
		{"system:serviceaccount:mon:prometheus", "get", "/metrics", true},
		{"system:serviceaccount:mon:other", "get", "/metrics", false},
		{"system:serviceaccount:mon:prometheus", "create", "/metrics", false},
		{"system:serviceaccount:mon:prometheus", "get", "/debug", false},
	} {
		if got := p.staticAllows(c.user, nr(c.verb, c.path)); got != c.want {
			t.Errorf("%s %s %s: %v, want %v", c.user, c.verb, c.path, got, c.want)
		}
	}
}

// TestAuthzFileRefused: what kube-rbac-proxy would ignore or get wrong at
// request time stops the proxy at start-up, naming what is wrong.
func TestAuthzFileRefused(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"authorization:\n  resourceAtributes: {resource: pods}\n", `unknown field "resourceAtributes"`},
		{"authorization:\n  resourceAttributes: {namespace: '{{ .Value'}\n", "resourceAttributes.namespace"},
		{"authorization:\n  resourceAttributes: {namespace: '{{ .Namespace }}'}\n", "resourceAttributes.namespace"},
		{"authorization:\n  static: [{resourceRequest: true, path: /metrics}]\n", "authorization.static[0]"},
		{"authorization:\n  static: [{path: ''}]\n", "authorization.static[0]"},
		{"authorization: [1]\n", "cannot unmarshal"},
	} {
		if _, err := parseAuthzFile([]byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming %q", c.file, err, c.want)
		}
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxConfigFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readAuthzFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over the limit: %v", err)
	}
	if _, err := readAuthzFile(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.Contains(err.Error(), "--config-file") {
		t.Errorf("a missing file: %v", err)
	}
}
