package streamwal

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
)

func TestAFencedWriteIsMilvusErrFenced(t *testing.T) {
	fenced := status.Error(codes.FailedPrecondition, "channel 'c' is fenced by another owner")
	if err := appendError(fenced); !errors.Is(err, walimpls.ErrFenced) {
		t.Errorf("fenced: %v", err)
	}
	for _, other := range []error{
		status.Error(codes.FailedPrecondition, "node misconfigured: no admin url"),
		status.Error(codes.FailedPrecondition, "stale term: channel 'c' is at term 3"),
		status.Error(codes.FailedPrecondition, "channel in use: node 2 serves it"),
		status.Error(codes.NotFound, "channel 'c' is not open on this node"),
		status.Error(codes.InvalidArgument, "bad"),
	} {
		err := appendError(other)
		if errors.Is(err, walimpls.ErrFenced) {
			t.Errorf("%v is not a fence", other)
		}
		if status.Code(err) != status.Code(other) {
			t.Errorf("%v lost its status: %v", other, err)
		}
	}
	if appendError(nil) != nil {
		t.Error("nil is not an error")
	}
}
