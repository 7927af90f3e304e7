package connector

import (
	"context"
	"errors"
	"fmt"
	"net"

	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// peerCreds are the socket role's transport credentials: no security of
// their own (the socket's mode and group decide who reaches it), but each
// connection learns from the kernel who is on the other end (SO_PEERCRED:
// the process ID and user ID), so that a caller without a token still has
// an identity of its own — its idempotency keys are its process's, not
// shared with every other tokenless caller on the node.
type peerCreds struct{}

// PeerInfo is the kernel's word on the process at the other end of a
// Unix-socket connection.
type PeerInfo struct {
	grpccreds.CommonAuthInfo
	PID, UID uint32
}

// AuthType names the credentials.
func (PeerInfo) AuthType() string { return "unix-peercred" }

func (peerCreds) ServerHandshake(c net.Conn) (net.Conn, grpccreds.AuthInfo, error) {
	info := PeerInfo{CommonAuthInfo: grpccreds.CommonAuthInfo{SecurityLevel: grpccreds.NoSecurity}}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c, info, nil
	}
	pid, uid, err := peerOf(uc)
	if err != nil {
		return nil, nil, fmt.Errorf("connector: the peer's credentials: %w", err)
	}
	info.PID, info.UID = pid, uid
	return c, info, nil
}

func (peerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, grpccreds.AuthInfo, error) {
	return nil, nil, errors.New("connector: peer credentials are the server's")
}

func (peerCreds) Info() grpccreds.ProtocolInfo {
	return grpccreds.ProtocolInfo{SecurityProtocol: "unix-peercred"}
}

func (p peerCreds) Clone() grpccreds.TransportCredentials { return p }

func (peerCreds) OverrideServerName(string) error { return nil }

// peerKey is the key namespace of a caller without a token: its process on
// the node, as the kernel names it; "" when the kernel did not say.
func peerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	if info, ok := p.AuthInfo.(PeerInfo); ok && info.PID != 0 {
		return fmt.Sprintf("peer:%d:%d", info.UID, info.PID)
	}
	return ""
}
