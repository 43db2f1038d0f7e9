package main

// Every call but a coalesced Produce goes to the node as it came: its metadata, its
// frames both ways, its headers, trailers and status. The node keeps every rule it
// has (auth, tracing, the write outcome in the trailers); the front adds none.

import (
	"context"
	"errors"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var anyStream = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// forwarded is the caller's metadata as the node should see it: gRPC's own keys
// (pseudo-headers, content type, the client's user agent) are set by the front's
// connection anew.
func forwarded(in metadata.MD) metadata.MD {
	out := metadata.MD{}
	for k, v := range in {
		if strings.HasPrefix(k, ":") || k == "content-type" || k == "user-agent" || k == "te" {
			continue
		}
		out[k] = v
	}
	return out
}

// proxy forwards “ss“ to the node; “first“: a frame already read from it.
func (f *front) proxy(ss grpc.ServerStream, method string, first *frame) error {
	in, _ := metadata.FromIncomingContext(ss.Context())
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), forwarded(in)))
	defer cancel()
	cs, err := f.node.NewStream(ctx, anyStream, method)
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() { sent <- toNode(ss, cs, first) }()
	err = toCaller(ss, cs)
	if err == nil {
		// the node answered in full; a caller still sending gets the node's status
		return nil
	}
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	select {
	case e := <-sent:
		if e != nil {
			return e
		}
	default:
	}
	return status.Error(codes.Unavailable, err.Error())
}

func toNode(ss grpc.ServerStream, cs grpc.ClientStream, first *frame) error {
	if first != nil {
		if err := cs.SendMsg(first); err != nil {
			return nil // the node's status comes from toCaller
		}
	}
	for {
		m := &frame{}
		if err := ss.RecvMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				return cs.CloseSend()
			}
			return err
		}
		if err := cs.SendMsg(m); err != nil {
			return nil
		}
	}
}

func toCaller(ss grpc.ServerStream, cs grpc.ClientStream) error {
	header, err := cs.Header()
	if err == nil && len(header) > 0 {
		if err := ss.SendHeader(header); err != nil {
			return err
		}
	}
	for {
		m := &frame{}
		err := cs.RecvMsg(m)
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(m); err != nil {
			return err
		}
	}
}
