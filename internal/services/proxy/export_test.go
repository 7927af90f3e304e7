package proxy

import (
	"net/http"
	"net/url"

	authzv1 "k8s.io/api/authorization/v1"
)

// Attributes are what RBAC is asked about a request of method and target
// (a path and query) under s's --config-file.
func (s *Server) Attributes(method, target string) ([]authzv1.SubjectAccessReviewSpec, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	r := &http.Request{Method: method, URL: u, Header: http.Header{}}
	return s.rbac.policy.attributes(method, u.Path, s.rbac.policy.rewriteValues(r))
}

// StaticallyAllowed says whether a static entry of --config-file allows spec.
func (s *Server) StaticallyAllowed(spec authzv1.SubjectAccessReviewSpec) bool {
	return s.rbac.policy.staticAllows(spec.User, spec)
}

// SetGCPercent is setGCPercent, for the test.
var SetGCPercent = setGCPercent
