// Package decision builds, signs and verifies the PDP's decision records
// (schema flex-auth.decision-record.v2).
//
// A record binds a decision to the normalized request that obtained it
// (request_digest: sha256 over the RFC 8785 canonical JSON of the binding),
// to the policy and registry that produced it, and to the authenticated
// caller who asked. The PDP signs it as a compact JWS (ES256 or EdDSA, kid
// the RFC 7638 thumbprint of the key, typ flex-auth-decision+jwt) and
// publishes its verification keys as a JWKS.
//
// The digests alone prove nothing about who answered: every input to them
// is sent by the caller or published. Only the signature does. [Verify] is
// the consumer's check, and it fails closed: a missing, unsigned,
// wrongly-signed, stale or mismatched record is an error, never an allow.
package decision
