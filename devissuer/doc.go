// Package devissuer is the embedded default token issuer: a small stand-in
// for the Kubernetes API server's service-account token machinery, so that
// every callerauth service and test runs on a laptop with no cluster.
//
// It speaks the same wire protocols as the API server, so the same
// verification code runs against both:
//
//   - GET  /.well-known/openid-configuration   OIDC discovery
//   - GET  /openid/v1/jwks                     the verification keys
//   - POST /apis/authentication.k8s.io/v1/tokenreviews
//     the authentication.k8s.io/v1 TokenReview API, authenticated with the
//     reviewer token written to the state directory
//   - DELETE /api/v1/namespaces/{ns}/pods/{name}
//     deletes a bound pod, so that its tokens stop reviewing as
//     authenticated
//
// Tokens are Kubernetes-shaped service-account tokens (iss, sub, aud, exp,
// iat, nbf, jti and the kubernetes.io claim with namespace, service account,
// and, when bound, pod and node), minted under the TokenRequest rules: at
// least 600 s, a whole number of seconds, at most a configured maximum, and
// at least one audience.
//
// The signing key, the serving CA, the reviewer token and a registry of the
// service accounts, nodes and pods named in minted tokens live in a state
// directory, so a restart keeps them and the CLI can mint tokens that a
// running issuer accepts.
package devissuer
