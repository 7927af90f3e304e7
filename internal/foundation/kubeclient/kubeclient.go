// Package kubeclient makes REST clients of one Kubernetes API group
// version — the request client-go's typed clients make — without the
// clientset of every group, so that what links it (authn/kube's
// TokenReview, callerauth-proxy's SubjectAccessReview) stays light.
package kubeclient

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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

// Load is the client configuration of a kubeconfig file, or, with none
// given, the in-cluster one (the pod's service account).
func Load(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no kubeconfig given and not running in a cluster: %w", err)
	}
	return rc, nil
}
