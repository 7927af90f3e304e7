package decision_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/callerauth/callerauth/decision"
)

// A decision record signed by the PDP and verified by its consumer: bound
// to the request it answers (its RFC 8785 digest) and to the caller, under
// a stated schema and JWS typ, against the published keys. A record
// replayed for another request fails closed.
func ExampleVerify() {
	profile := decision.Profile{Schema: "example.decision-record.v1", Type: "example-decision+jwt"}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer, err := decision.NewSigner(profile, key)
	if err != nil {
		panic(err)
	}
	request := []byte(`{"system":"secrets-engine","resource":"db-password","action":"rotate"}`)
	var r decision.Record
	_ = r.Bind(json.RawMessage(request))
	now := time.Now()
	r.DecisionID, r.Effect, r.Reason, r.PolicyVersion = "d-1", decision.Allow, "rotation_allowed", "v1"
	r.Provenance = decision.Provenance{Evaluator: "example", Mode: "enforce", PolicyPackageID: "secrets-engine", DecidedAt: now}
	r.Caller = decision.Caller{Authenticated: true, Principal: "system:serviceaccount:secrets-engine:secrets-engine", AuthenticatedBy: "TokenReview"}
	signed, err := signer.Sign(&r)
	if err != nil {
		panic(err)
	}
	response, _ := json.Marshal(signed)

	got, err := decision.Verify(response, decision.VerifyOptions{Profile: profile, Keys: signer.JWKS(), Request: request})
	fmt.Println(got.Effect, got.Caller.Principal, err)
	_, err = decision.Verify(response, decision.VerifyOptions{Profile: profile, Keys: signer.JWKS(), Request: []byte(`{"system":"secrets-engine","resource":"db-password","action":"read"}`)})
	fmt.Println(errors.Is(err, decision.ErrRequestMismatch))
	// Output:
	// allow system:serviceaccount:secrets-engine:secrets-engine <nil>
	// true
}
