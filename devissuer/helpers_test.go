package devissuer_test

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func metav1TypeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{Kind: "TokenReview", APIVersion: "authentication.k8s.io/v1"}
}
