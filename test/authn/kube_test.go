package authn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/authn/kube"
	"github.com/callerauth/callerauth/internal/kit/forge"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

func deleteNow() metav1.DeleteOptions {
	zero := int64(0)
	return metav1.DeleteOptions{GracePeriodSeconds: &zero}
}

// TestRealTokenShape checks the claims a real bound token carries.
func TestRealTokenShape(t *testing.T) {
	_, k := fixtures(t)
	c := forge.Claims(k.valid)
	if c["iss"] != kubeapi.Issuer || c["sub"] != "system:serviceaccount:matrix:caller" || fmt.Sprint(c["aud"]) != "[flex-auth]" {
		t.Fatalf("claims %v", c)
	}
	for _, key := range []string{"exp", "iat", "nbf", "jti"} {
		if _, ok := c[key]; !ok {
			t.Errorf("claim %s missing", key)
		}
	}
	kc := c["kubernetes.io"].(map[string]any)
	for _, key := range []string{"namespace", "serviceaccount", "pod", "node"} {
		if _, ok := kc[key]; !ok {
			t.Errorf("kubernetes.io.%s missing", key)
		}
	}
	if exp, iat := c["exp"].(float64), c["iat"].(float64); exp-iat != 600 {
		t.Errorf("lifetime %v; want 600", exp-iat)
	}
	// A lifetime below 600 s is refused by the API server itself.
	if _, err := apiserver.Token(context.Background(), "matrix", "caller", []string{audience}, 599, nil); err == nil || !strings.Contains(err.Error(), "10 minutes") {
		t.Errorf("599 s: %v", err)
	}
}

// TestReviewerWithoutRights: a service account that may not create
// TokenReviews makes every verification validator_error.
func TestReviewerWithoutRights(t *testing.T) {
	fixtures(t)
	ctx := context.Background()
	if _, err := apiserver.ServiceAccount(ctx, "matrix", "no-rights"); err != nil {
		t.Fatal(err)
	}
	tok, err := apiserver.Token(ctx, "matrix", "no-rights", nil, 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := kube.New(kube.Config{REST: apiserver.RESTAs(tok), Audiences: []string{audience}})
	if err != nil {
		t.Fatal(err)
	}
	_, k := fixtures(t)
	_, err = a.Authenticate(ctx, k.valid)
	if authn.ReasonOf(err) != authn.ValidatorError || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("err = %v; want validator_error (forbidden)", err)
	}
}
