package cli_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/callerauth/callerauth/internal/services/cli"
)

// The seed's workstation: a search suffix that answers wildcard.
func wildcardResolver(_ context.Context, host string) ([]string, error) {
	switch {
	case strings.HasSuffix(host, "."):
		return nil, errors.New("no such host")
	case strings.HasSuffix(host, ".svc.cluster.local"):
		return []string{"80.158.43.29"}, nil
	}
	return nil, errors.New("no such host")
}

// A cluster resolver: only real services resolve.
func clusterResolver(_ context.Context, host string) ([]string, error) {
	if strings.TrimSuffix(host, ".") == "flex-auth-secrets-engine.flex-auth.svc.cluster.local" {
		return []string{"10.96.12.34"}, nil
	}
	return nil, errors.New("no such host")
}

func TestDoctorDNS(t *testing.T) {
	const name = "flex-auth-secrets-engine.flex-auth.svc.cluster.local"
	tests := []struct {
		name     string
		resolver cli.Lookup
		arg      string
		wantErr  bool
		wants    []string
	}{
		{"the seed's wildcard", wildcardResolver, name, true, []string{"HAZARD", "80.158.43.29", `"` + name + `."`}},
		{"the trailing dot fails closed there", wildcardResolver, name + ".", false, []string{"does not resolve", "fails closed"}},
		{"a real cluster", clusterResolver, name, false, []string{"10.96.12.34", "is a real record"}},
	}
	for _, ip := range []string{"127.0.0.1", "10.0.0.1.", "::1", "[::1]"} {
		var out bytes.Buffer
		err := cli.Execute(context.Background(), &cli.Options{Stdout: &out, Stderr: &out, Lookup: wildcardResolver, Getenv: func(string) string { return "" }}, []string{"doctor", "dns", ip})
		if err == nil || !strings.Contains(err.Error(), "is an IP address, not a DNS name") || strings.Contains(out.String(), "callerauth-probe") {
			t.Errorf("doctor dns %s: %v\n%s", ip, err, out.String())
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := cli.Execute(context.Background(), &cli.Options{Stdout: &out, Stderr: &out, Lookup: tt.resolver, Getenv: func(string) string { return "" }}, []string{"doctor", "dns", tt.arg})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v; want error %v\n%s", err, tt.wantErr, out.String())
			}
			for _, w := range tt.wants {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
