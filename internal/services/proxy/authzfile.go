package proxy

// --config-file: kube-rbac-proxy's authorization configuration, read as
// it is, so that a user swaps the image and keeps the file.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/template"

	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/yaml"
)

// Limits of --config-file.
const (
	// MaxConfigFileBytes bounds the file.
	MaxConfigFileBytes = 1 << 20
	// MaxStaticEntries bounds authorization.static.
	MaxStaticEntries = 1000
	// MaxRewriteValues bounds the values a request may carry for
	// authorization.rewrites: each is one SubjectAccessReview. A request
	// with more is refused rbac_attributes_invalid.
	MaxRewriteValues = 16
	// maxTemplateOutput bounds one rewritten attribute.
	maxTemplateOutput = 1024
)

// configFile is the file's one key.
type configFile struct {
	Authorization *authzFile `json:"authorization,omitempty"`
}

// authzFile is kube-rbac-proxy's authorization configuration.
type authzFile struct {
	Rewrites           *rewritesFile           `json:"rewrites,omitempty"`
	ResourceAttributes *resourceAttributesFile `json:"resourceAttributes,omitempty"`
	Static             []staticFile            `json:"static,omitempty"`
}

type rewritesFile struct {
	ByQueryParameter *nameFile `json:"byQueryParameter,omitempty"`
	ByHTTPHeader     *nameFile `json:"byHttpHeader,omitempty"`
}

type nameFile struct {
	Name string `json:"name,omitempty"`
}

type resourceAttributesFile struct {
	Namespace   string `json:"namespace,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Resource    string `json:"resource,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
}

type staticFile struct {
	// User has no tag in kube-rbac-proxy's type: JSON matches "user"
	// (and "User") to it, case-insensitively.
	User            userFile `json:"user"`
	Verb            string   `json:"verb,omitempty"`
	Namespace       string   `json:"namespace,omitempty"`
	APIGroup        string   `json:"apiGroup,omitempty"`
	Resource        string   `json:"resource,omitempty"`
	Subresource     string   `json:"subresource,omitempty"`
	Name            string   `json:"name,omitempty"`
	ResourceRequest bool     `json:"resourceRequest,omitempty"`
	Path            string   `json:"path,omitempty"`
}

type userFile struct {
	Name string `json:"name,omitempty"`
	// Groups is read and, as by kube-rbac-proxy, not matched.
	Groups []string `json:"groups,omitempty"`
}

// attributesPolicy is what --config-file says (or its absence): how a
// request becomes the attributes RBAC is asked about.
type attributesPolicy struct {
	// resource: the resource attributes, each a template of .Value;
	// nil: a non-resource request of the URL path.
	resource *[6]*template.Template
	// queryParam and header name the rewrite's source; both empty: no
	// rewrite.
	queryParam, header string
	static             []staticFile
}

// readAuthzFile reads --config-file. Every field kube-rbac-proxy reads is
// read the same way; what it would silently ignore or get wrong at
// request time — an unknown field, a template that does not parse or
// reads anything but .Value, a static entry that is both a resource and
// a path — stops the proxy here, naming the file.
func readAuthzFile(name string) (attributesPolicy, error) {
	b, err := readFlagFile("--config-file", name, MaxConfigFileBytes)
	if err != nil {
		return attributesPolicy{}, err
	}
	p, err := parseAuthzFile(b)
	if err != nil {
		return attributesPolicy{}, fmt.Errorf("proxy: --config-file %s: %w", name, err)
	}
	return p, nil
}

func parseAuthzFile(b []byte) (attributesPolicy, error) {
	var cf configFile
	if err := yaml.UnmarshalStrict(b, &cf); err != nil {
		return attributesPolicy{}, err
	}
	var p attributesPolicy
	a := cf.Authorization
	if a == nil {
		return p, nil
	}
	if len(a.Static) > MaxStaticEntries {
		return p, fmt.Errorf("authorization.static: %d entries, at most %d", len(a.Static), MaxStaticEntries)
	}
	for i, s := range a.Static {
		if s.ResourceRequest != (s.Path == "") {
			return p, fmt.Errorf("authorization.static[%d]: a resource request (resourceRequest: true) names no path, and a non-resource one needs a path", i)
		}
	}
	p.static = a.Static
	if rw := a.Rewrites; rw != nil {
		if rw.ByQueryParameter != nil {
			p.queryParam = rw.ByQueryParameter.Name
		}
		if rw.ByHTTPHeader != nil {
			p.header = http.CanonicalHeaderKey(rw.ByHTTPHeader.Name)
		}
	}
	if ra := a.ResourceAttributes; ra != nil {
		var ts [6]*template.Template
		for i, f := range []struct{ field, text string }{{"namespace", ra.Namespace}, {"apiGroup", ra.APIGroup},
			{"apiVersion", ra.APIVersion}, {"resource", ra.Resource}, {"subresource", ra.Subresource}, {"name", ra.Name}} {
			t, err := template.New(f.field).Option("missingkey=error").Parse(f.text)
			if err == nil {
				// A template reading anything but .Value fails here rather
				// than, as in kube-rbac-proxy, yielding "" on every request.
				err = t.Execute(io.Discard, rewriteValue{Value: "x"})
			}
			if err != nil {
				return p, fmt.Errorf("authorization.resourceAttributes.%s %q: %w", f.field, f.text, err)
			}
			ts[i] = t
		}
		p.resource = &ts
	}
	return p, nil
}

// rewriteValue is what a resource attribute's template reads.
type rewriteValue struct{ Value string }

// rewrites reports whether a request's values rewrite its attributes (only
// with resource attributes, as in kube-rbac-proxy).
func (p attributesPolicy) rewrites() bool {
	return p.resource != nil && (p.queryParam != "" || p.header != "")
}

// rewriteValues are the request's values for the rewrite: the query
// parameter's, then the header's.
func (p attributesPolicy) rewriteValues(r *http.Request) []string {
	var vs []string
	if p.queryParam != "" {
		vs = append(vs, r.URL.Query()[p.queryParam]...)
	}
	if p.header != "" {
		vs = append(vs, r.Header.Values(p.header)...)
	}
	return vs
}

// errNoRewriteValue is a request that carries no value for the rewrite:
// kube-rbac-proxy answers it 400.
var errNoRewriteValue = errors.New("the request carries no value for the configured rewrite")

// verbOf maps an HTTP method to the verb RBAC is asked about, as
// kube-rbac-proxy maps it.
func verbOf(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return "*"
}

// attributes are what RBAC is asked about a request of method and path
// with the rewrite's values: each must be allowed.
func (p attributesPolicy) attributes(method, urlPath string, values []string) ([]authzv1.SubjectAccessReviewSpec, error) {
	verb := verbOf(method)
	if p.resource == nil {
		return []authzv1.SubjectAccessReviewSpec{{NonResourceAttributes: &authzv1.NonResourceAttributes{Path: urlPath, Verb: verb}}}, nil
	}
	if !p.rewrites() {
		ra, err := p.resourceAttributes(verb, "")
		return []authzv1.SubjectAccessReviewSpec{{ResourceAttributes: ra}}, err
	}
	if len(values) == 0 {
		return nil, errNoRewriteValue
	}
	if len(values) > MaxRewriteValues {
		return nil, fmt.Errorf("the request carries %d values for the configured rewrite, at most %d", len(values), MaxRewriteValues)
	}
	out := make([]authzv1.SubjectAccessReviewSpec, len(values))
	for i, v := range values {
		ra, err := p.resourceAttributes(verb, v)
		if err != nil {
			return nil, err
		}
		out[i].ResourceAttributes = ra
	}
	return out, nil
}

func (p attributesPolicy) resourceAttributes(verb, value string) (*authzv1.ResourceAttributes, error) {
	var out [6]string
	var buf bytes.Buffer
	for i, t := range p.resource {
		buf.Reset()
		if err := t.Execute(&buf, rewriteValue{Value: value}); err != nil {
			return nil, err
		}
		if buf.Len() > maxTemplateOutput {
			return nil, fmt.Errorf("the rewritten %s is longer than %d bytes", t.Name(), maxTemplateOutput)
		}
		out[i] = buf.String()
	}
	return &authzv1.ResourceAttributes{Verb: verb, Namespace: out[0], Group: out[1], Version: out[2], Resource: out[3], Subresource: out[4], Name: out[5]}, nil
}

// staticAllows reports whether a static entry allows user's request of
// spec, as kube-rbac-proxy matches them: an empty field matches
// anything; the user's name alone is compared.
func (p attributesPolicy) staticAllows(user string, spec authzv1.SubjectAccessReviewSpec) bool {
	for _, s := range p.static {
		if s.matches(user, spec) {
			return true
		}
	}
	return false
}

func (s staticFile) matches(user string, spec authzv1.SubjectAccessReviewSpec) bool {
	eq := func(want, got string) bool { return want == "" || want == got }
	if !eq(s.User.Name, user) {
		return false
	}
	if ra := spec.ResourceAttributes; ra != nil {
		return s.ResourceRequest && eq(s.Verb, ra.Verb) && eq(s.Namespace, ra.Namespace) && eq(s.APIGroup, ra.Group) &&
			eq(s.Resource, ra.Resource) && eq(s.Subresource, ra.Subresource) && eq(s.Name, ra.Name) && s.Path == ""
	}
	nr := spec.NonResourceAttributes
	return !s.ResourceRequest && nr != nil && eq(s.Verb, nr.Verb) && eq(s.Path, nr.Path) &&
		s.Namespace == "" && s.APIGroup == "" && s.Resource == "" && s.Subresource == "" && s.Name == ""
}

// describe names a review's attributes for the log.
func describe(spec authzv1.SubjectAccessReviewSpec) string {
	if ra := spec.ResourceAttributes; ra != nil {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s", ra.Verb, ra.Resource)
		if ra.Subresource != "" {
			b.WriteString("/" + ra.Subresource)
		}
		if ra.Group != "" {
			b.WriteString("." + ra.Group)
		}
		if ra.Name != "" {
			b.WriteString(" " + ra.Name)
		}
		if ra.Namespace != "" {
			b.WriteString(" in " + ra.Namespace)
		}
		return b.String()
	}
	if nr := spec.NonResourceAttributes; nr != nil {
		return nr.Verb + " " + nr.Path
	}
	return "nothing"
}
