package hydra_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/callerauth/callerauth/internal/foundation/pki"
	"github.com/callerauth/callerauth/internal/kit/hydra"
	"github.com/callerauth/callerauth/token"
)

// TestClientCredentials: the harness's Hydra issues JWT access tokens by
// the client-credentials grant, as a tenant IdP for the vmafx controller:
// iss its issuer, sub the client id, aud the audience asked for, scp the
// scopes granted (a list).
func TestClientCredentials(t *testing.T) {
	ca, err := pki.NewCA("hydra test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := hydra.Start(ctx, t.TempDir(), ca, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	secret, err := h.Client("operator-a", []string{"vmafx:reader", "vmafx:submitter"}, "vmafx-controller")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	cc := clientcredentials.Config{ClientID: "operator-a", ClientSecret: secret, TokenURL: h.TokenURL, Scopes: []string{"vmafx:reader"},
		EndpointParams: url.Values{"audience": {"vmafx-controller"}}, AuthStyle: oauth2.AuthStyleInHeader}
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, hc))
	if err != nil {
		t.Fatalf("token: %v\n%s", err, h.Log())
	}
	c, err := token.ReadClaims(tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if c.Issuer != h.Issuer || c.Subject != "operator-a" || !slices.Contains(c.Audience, "vmafx-controller") || c.Expiry == nil {
		t.Fatalf("claims %+v", c)
	}
	payload, _ := token.Payload(tok.AccessToken)
	if !slices.Contains([]string{`"scp":["vmafx:reader"]`}, extract(string(payload), `"scp":`)) {
		t.Fatalf("scp in %s", payload)
	}
}

// extract returns key and its JSON array value from a compact payload.
func extract(payload, key string) string {
	i := indexOf(payload, key)
	if i < 0 {
		return ""
	}
	j := indexOf(payload[i:], "]")
	if j < 0 {
		return ""
	}
	return payload[i : i+j+1]
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
