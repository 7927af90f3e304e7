package connector

import (
	"context"

	"google.golang.org/protobuf/types/known/emptypb"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
)

// Publish is the HealthEventOccurredV1 handler the gRPC server calls, for
// a test that calls it with a context of its own.
func (s *Server) Publish(ctx context.Context, in *pcv1.HealthEvents) (*emptypb.Empty, error) {
	return (&service{s: s}).HealthEventOccurredV1(ctx, in)
}
