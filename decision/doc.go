// Package decision builds, signs and verifies a PDP's decision records. The
// record format — the "schema" member and the JWS typ — is a [Profile] the
// PDP states (callerauth's pdp signs flex-auth.decision-record.v2 records
// typed flex-auth-decision+jwt); signer and verifier must agree on it.
//
// A record binds a decision to the normalized request that obtained it
// (request_digest: sha256 over the RFC 8785 canonical JSON of the binding),
// to the policy and registry that produced it, and to the authenticated
// caller who asked. The PDP signs it as a compact JWS (ES256 or EdDSA, kid
// the RFC 7638 thumbprint of the key, typ the profile's) and
// publishes its verification keys as a JWKS.
//
// The digests alone prove nothing about who answered: every input to them
// is sent by the caller or published. Only the signature does. [Verify] is
// the consumer's check, and it fails closed: a missing, unsigned,
// wrongly-signed, stale or mismatched record is an error, never an allow.
package decision
