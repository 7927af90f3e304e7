// Package eventsvc is a minimal gRPC events service for tests and the demo
// of node binding: one unary method, Report, that takes a batch of node
// names (a google.protobuf.ListValue of strings, a real protobuf message)
// and answers them as the handler stamped them with the guard's verdict.
package eventsvc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
)

// Method is the full name of the Report method.
const Method = "/callerauth.demo.Events/Report"

type server interface{}

// Desc describes the service; register it with grpc.Server.RegisterService
// (the implementation argument is unused and may be nil).
var Desc = grpc.ServiceDesc{
	ServiceName: "callerauth.demo.Events",
	HandlerType: (*server)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Report", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.ListValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		if icpt == nil {
			return report(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: Method}, report)
	}}},
}

func report(ctx context.Context, req any) (any, error) {
	v, ok := guard.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no verdict in context")
	}
	return List(binding.NodeGrantOf(v.Grant).Stamp(Nodes(req.(*structpb.ListValue)))), nil
}

// Extract is the guard's request extractor for Report.
func Extract(_ context.Context, _ string, msg any) (binding.Request, error) {
	l, ok := msg.(*structpb.ListValue)
	if !ok {
		return binding.Request{}, status.Errorf(codes.InvalidArgument, "unexpected message %T", msg)
	}
	return binding.NodesRequest(Nodes(l)), nil
}

// Nodes reads a batch's node names.
func Nodes(l *structpb.ListValue) []string {
	out := make([]string, len(l.GetValues()))
	for i, v := range l.GetValues() {
		out[i] = v.GetStringValue()
	}
	return out
}

// List builds a batch from node names.
func List(nodes []string) *structpb.ListValue {
	l := &structpb.ListValue{}
	for _, n := range nodes {
		l.Values = append(l.Values, structpb.NewStringValue(n))
	}
	return l
}
