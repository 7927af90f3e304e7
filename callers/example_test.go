package callers_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/callerauth/callerauth/authn"
	"github.com/callerauth/callerauth/bearer"
	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/callers"
)

// The --caller-* flags, completed: a flag the backend chosen would never
// read stops the service at start-up, naming what reads it.
func ExampleOptions_Complete() {
	o := callers.NewOptions()
	o.Audience = "my-service" // --caller-audience's default
	flags := pflag.NewFlagSet("my-service", pflag.ContinueOnError)
	o.AddServiceFlags(flags)
	o.AddFlags(flags)
	_ = flags.Parse([]string{"--caller-backend", "oidc", "--caller-authentication-config", "authn.yaml", "--caller-review-qps", "50"})
	_, err := o.Complete()
	fmt.Println(err)
	// Output:
	// caller authentication: --caller-review-qps is read only with --caller-backend tokenreview; with --caller-backend oidc as set it would do nothing
}

// Building the stack: the backend (here an authenticator of your own, with
// Custom; from flags, Options.Complete's Config), the verdict cache, the
// guard judging the service's rule, and the collectors and runnables they
// are made of.
func ExampleNew() {
	verify := authn.AuthenticatorFunc(func(context.Context, string) (*authn.Caller, error) {
		return &authn.Caller{Username: "system:serviceaccount:ci:runner", Expiry: time.Now().Add(time.Hour)}, nil
	})
	reg := prometheus.NewRegistry()
	st, err := callers.New(callers.Custom(verify, "my-validator"), callers.Service{
		Name:     "my_service",
		Rule:     binding.SystemBinding(map[string]string{"ci": "system:serviceaccount:ci:runner"}),
		Registry: reg,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	v := st.Guard.Check(context.Background(), bearer.Parse([]string{"Bearer t"}), binding.Request{System: "ci"})
	fmt.Println(v.Allowed, v.Caller.Username, len(st.Runnables))
	// Output:
	// true system:serviceaccount:ci:runner 0
}
