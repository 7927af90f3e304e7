// Package kubeclient makes REST clients of one Kubernetes API group
// version — the request client-go's typed clients make — without the
// clientset of every group, so that what links it (authn/kube's
// TokenReview, callerauth-proxy's SubjectAccessReview) stays light.
package kubeclient

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// Client is a REST client of one group version and the parameter codec
// of its options.
type Client struct {
	REST   *rest.RESTClient
	Params runtime.ParameterCodec
}

// For is a client of gv over a copy of rc, knowing the types addToScheme
// registers and the API server's Status (so that an error answer is an
// APIStatus). rc's rate limit (QPS, Burst) applies as it is.
func For(rc *rest.Config, gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := addToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, gv)
	c := rest.CopyConfig(rc)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &Client{REST: client, Params: runtime.NewParameterCodec(scheme)}, nil
}
