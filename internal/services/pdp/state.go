package pdp

// What a reload replaces whole — the policy package, the registry and the
// signing keys — and how it is followed on disk.

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/services/pdp/policy"
)

// state is what a reload replaces, whole: the policy package, the registry
// and the record signer. A check reads one state, so the key that signs its
// record is one that the JWKS endpoint publishes from that moment on.
type state struct {
	pkg    *policy.Package
	reg    *policy.Registry
	signer *decision.Signer
	// evalSigner signs AuthZEN answers with the same keys, under
	// EvaluationProfile.
	evalSigner *decision.Signer
	// searchSigner signs AuthZEN search pages, under SearchProfile.
	searchSigner *decision.Signer
	// metaSigner signs the AuthZEN metadata's signed_metadata.
	metaSigner *decision.Signer
	// group shares signer's signatures among the checks that arrive
	// together, evalGroup evalSigner's among single AuthZEN evaluations;
	// nil with --sign-group-max 0.
	group, evalGroup *decision.Group
	// pageKey MACs search page tokens: derived from the signing keys, so
	// every replica shares it and a key rotation replaces it.
	pageKey []byte
}

// load reads the package, the registry and the keys, and makes the
// signers (and the groups that share /v1/check's and single AuthZEN
// evaluations' signatures, unless --sign-group-max is 0).
func (s *Server) load() (*state, error) {
	st, err := load(s.c.PolicyDir, s.c.Registry, s.c.SigningKeyFile)
	if err != nil {
		return nil, err
	}
	if s.c.SignGroupMax > 0 {
		st.group = decision.NewGroup(st.signer, s.c.SignGroupMax, s.now)
		st.group.Observe = func(n int) { s.groupSize.Observe(float64(n)) }
		// A check hands its group what a required decision log keeps
		// (decide); keepGroup has nothing to do for a group of others.
		st.group.Then = s.keepGroup
		st.evalGroup = decision.NewGroup(st.evalSigner, s.c.SignGroupMax, s.now)
		st.evalGroup.Observe = func(n int) { s.evalGroupSize.Observe(float64(n)) }
	}
	return st, nil
}

func load(dir, registry, keyFile string) (*state, error) {
	pkg, err := policy.LoadPackage(dir)
	if err != nil {
		return nil, err
	}
	reg, err := pkg.LoadRegistry(registry)
	if err != nil {
		return nil, err
	}
	keys, err := decision.LoadKeyFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pdp: --signing-key-file: %w", err)
	}
	// One key set, one signer per format: a record of one is never taken
	// for another (each has its own JWS typ).
	st := &state{pkg: pkg, reg: reg}
	for _, f := range []struct {
		p  decision.Profile
		to **decision.Signer
	}{{RecordProfile, &st.signer}, {EvaluationProfile, &st.evalSigner}, {SearchProfile, &st.searchSigner}, {MetadataProfile, &st.metaSigner}} {
		if *f.to, err = decision.NewSigner(f.p, keys...); err != nil {
			return nil, fmt.Errorf("pdp: --signing-key-file %s: %w", keyFile, err)
		}
	}
	if st.pageKey, err = pageTokenKey(keys); err != nil {
		return nil, fmt.Errorf("pdp: --signing-key-file %s: %w", keyFile, err)
	}
	return st, nil
}

// pageTokenKey derives the key that MACs search page tokens from the
// signing keys' private material: secret as they are, the same on every
// replica that mounts them, replaced when they rotate.
func pageTokenKey(keys []crypto.Signer) ([]byte, error) {
	m := hmac.New(sha256.New, []byte("callerauth pdp search page token v2"))
	for _, k := range keys {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(m, "%d:", len(der)) // length-prefixed: no two key lists collide
		m.Write(der)
	}
	return m.Sum(nil), nil
}

// Reload loads the package, the registry and the signing keys again, all
// or nothing; on failure the previous version keeps serving and the error
// says why.
func (s *Server) Reload() error { return s.state.Reload() }

func kids(s *decision.Signer) []string {
	var out []string
	for _, k := range s.JWKS().Keys {
		out = append(out, k.KeyID)
	}
	return out
}

// EvaluationSigner returns the signer of AuthZEN answers now in use.
func (s *Server) EvaluationSigner() *decision.Signer { return s.state.Get().evalSigner }

// Signer returns the record signer now in use.
func (s *Server) Signer() *decision.Signer { return s.state.Get().signer }

// reloadLoop reloads the policy and keys on SIGHUP, and when their files
// change (looked at every --reload-interval).
func (s *Server) reloadLoop(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = s.Reload()
			}
		}
	}()
	return s.state.Start(ctx)
}
