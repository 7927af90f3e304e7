package devissuer

// SubjectAccessReview, as a cluster's RBAC would answer it, from grants
// the registry holds: so that callerauth-proxy --authorization rbac runs
// against the dev issuer in the demo and the walks.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PathSubjectAccessReviews is where the issuer answers
// SubjectAccessReviews.
const PathSubjectAccessReviews = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

// maxGrants bounds the grants the registry holds.
const maxGrants = 1000

// AccessGrant is one permission the issuer's SubjectAccessReview gives,
// an RBAC rule reduced to one subject and one verb: to a user or a group,
// either a non-resource URL (a path, or a prefix ending in *) or a
// resource. "*" matches any verb; an empty resource field matches any
// value of it.
type AccessGrant struct {
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
	Verb  string `json:"verb"`
	// NonResourceURL makes a non-resource grant; else the resource fields
	// say what it grants (Resource required).
	NonResourceURL string `json:"nonResourceURL,omitempty"`
	Namespace      string `json:"namespace,omitempty"`
	APIGroup       string `json:"apiGroup,omitempty"`
	Resource       string `json:"resource,omitempty"`
	Subresource    string `json:"subresource,omitempty"`
	Name           string `json:"name,omitempty"`
}

func (g AccessGrant) validate() error {
	switch {
	case (g.User == "") == (g.Group == ""):
		return errors.New("devissuer: a grant names a user or a group, not both")
	case g.Verb == "":
		return errors.New("devissuer: a grant names a verb (or *)")
	case (g.NonResourceURL == "") == (g.Resource == ""):
		return errors.New("devissuer: a grant is of a non-resource URL or of a resource, one of them")
	case g.NonResourceURL != "" && (g.Namespace != "" || g.APIGroup != "" || g.Subresource != "" || g.Name != ""):
		return errors.New("devissuer: a non-resource grant names no namespace, API group, subresource or name")
	case g.NonResourceURL != "" && !strings.HasPrefix(g.NonResourceURL, "/"):
		return fmt.Errorf("devissuer: non-resource URL %q: want a path beginning with /", g.NonResourceURL)
	}
	return nil
}

// Grant adds g; a grant already held is not added twice.
func (i *Issuer) Grant(g AccessGrant) error {
	if err := g.validate(); err != nil {
		return err
	}
	return i.updateRegistry(func(r *registry) error {
		if slices.Contains(r.Grants, g) {
			return nil
		}
		if len(r.Grants) >= maxGrants {
			return fmt.Errorf("devissuer: %d grants held, the most the issuer keeps", maxGrants)
		}
		r.Grants = append(r.Grants, g)
		return nil
	})
}

// ErrNoSuchGrant is returned by Revoke for a grant the issuer does not hold.
var ErrNoSuchGrant = errors.New("devissuer: no such grant")

// Revoke removes g.
func (i *Issuer) Revoke(g AccessGrant) error {
	return i.updateRegistry(func(r *registry) error {
		n := len(r.Grants)
		r.Grants = slices.DeleteFunc(r.Grants, func(h AccessGrant) bool { return h == g })
		if len(r.Grants) == n {
			return fmt.Errorf("%w: %+v", ErrNoSuchGrant, g)
		}
		return nil
	})
}

// Access answers a SubjectAccessReview's spec from the grants held.
func (i *Issuer) Access(spec authzv1.SubjectAccessReviewSpec) (authzv1.SubjectAccessReviewStatus, error) {
	r, err := i.readRegistry()
	if err != nil {
		return authzv1.SubjectAccessReviewStatus{}, err
	}
	for _, g := range r.Grants {
		if g.allows(spec) {
			return authzv1.SubjectAccessReviewStatus{Allowed: true, Reason: fmt.Sprintf("devissuer: granted %+v", g)}, nil
		}
	}
	return authzv1.SubjectAccessReviewStatus{Reason: "devissuer: no grant allows it"}, nil
}

// AccessReviews is how many SubjectAccessReviews the issuer has answered.
func (i *Issuer) AccessReviews() int64 { return i.accessReviews.Load() }

func (g AccessGrant) allows(s authzv1.SubjectAccessReviewSpec) bool {
	if (g.User != "" && g.User != s.User) || (g.Group != "" && !slices.Contains(s.Groups, g.Group)) {
		return false
	}
	any := func(want, got string) bool { return want == "" || want == got }
	verb := func(got string) bool { return g.Verb == "*" || g.Verb == got }
	if nr := s.NonResourceAttributes; nr != nil {
		if g.NonResourceURL == "" || !verb(nr.Verb) {
			return false
		}
		if p, ok := strings.CutSuffix(g.NonResourceURL, "*"); ok {
			return strings.HasPrefix(nr.Path, p)
		}
		return g.NonResourceURL == nr.Path
	}
	ra := s.ResourceAttributes
	return ra != nil && g.Resource != "" && verb(ra.Verb) && g.Resource == ra.Resource && any(g.Namespace, ra.Namespace) &&
		g.APIGroup == ra.Group && g.Subresource == ra.Subresource && any(g.Name, ra.Name)
}

func (i *Issuer) serveSubjectAccessReview(w http.ResponseWriter, r *http.Request) {
	i.accessReviews.Add(1)
	if !i.authorize(w, r, "create", "subjectaccessreviews", "authorization.k8s.io") {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeStatus(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, "reading SubjectAccessReview: "+err.Error())
		return
	}
	var sar authzv1.SubjectAccessReview
	obj, gvk, err := codecs.UniversalDeserializer().Decode(body, nil, &sar)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding SubjectAccessReview: "+err.Error())
		return
	}
	if _, ok := obj.(*authzv1.SubjectAccessReview); !ok || *gvk != authzv1.SchemeGroupVersion.WithKind("SubjectAccessReview") {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("want kind SubjectAccessReview, apiVersion %s; got %s", authzv1.SchemeGroupVersion, gvk))
		return
	}
	if (sar.Spec.ResourceAttributes == nil) == (sar.Spec.NonResourceAttributes == nil) {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "SubjectAccessReview.authorization.k8s.io is invalid: exactly one of nonResourceAttributes or resourceAttributes must be specified")
		return
	}
	if sar.Spec.User == "" && len(sar.Spec.Groups) == 0 {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "SubjectAccessReview.authorization.k8s.io is invalid: at least one of user or group must be specified")
		return
	}
	sar.SetGroupVersionKind(*gvk)
	if sar.Status, err = i.Access(sar.Spec); err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, sar)
}
