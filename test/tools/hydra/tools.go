//go:build tools

// Package tools pins Ory Hydra, a real OAuth2/OIDC provider that the vmafx
// end-to-end tests run as each tenant's identity provider. It is a module
// of its own, so that none of Hydra reaches a callerauth user; make builds
// it into .cache/hydra/.
package tools
