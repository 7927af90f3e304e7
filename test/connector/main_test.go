// Package connector_test starts the real platform-connector binary in both
// roles, against the dev issuer and a real kube-apiserver, and sends events
// through the publisher client.
package connector_test

import (
	"testing"

	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/kubeapi"
)

var (
	binary    string
	apiserver *kubeapi.Server
)

func TestMain(m *testing.M) {
	var bins map[string]string
	e2e.Main(m, &bins, []string{"cmd/platform-connector"}, func() (func(), error) {
		binary = bins["platform-connector"]
		return nil, nil
	}, kubeapi.ForTests(&apiserver))
}
