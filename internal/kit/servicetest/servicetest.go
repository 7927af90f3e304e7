// Package servicetest builds a service in a test the way its command
// does — options completed, then New — with a hook to change the completed
// configuration first (an authenticator of the test's own, a clock).
package servicetest

import "testing"

// New completes o, lets set change the configuration (nil: nothing), and
// builds the service with newService (the service's New), failing t on
// an error of either.
func New[C, S any](t testing.TB, o interface{ Complete() (C, error) }, set func(*C), newService func(C) (S, error)) S {
	t.Helper()
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(&c)
	}
	s, err := newService(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
