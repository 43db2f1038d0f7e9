package streamwal

import (
	"strings"

	"github.com/cockroachdb/errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
)

// misconfiguredPrefix starts the details of a FAILED_PRECONDITION that is the
// node's own set-up, not a fence (streamwal/node/client_errors.py reads it alike).
const misconfiguredPrefix = "node misconfigured"

// appendError is a failed write (Produce, Truncate) as Milvus's contract has it: a
// fence is walimpls.ErrFenced, which tells Milvus to close this WAL and open a new
// one; anything else keeps its gRPC status (errors.Is/status.FromError still see it).
func appendError(err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.FailedPrecondition && !strings.HasPrefix(st.Message(), misconfiguredPrefix) {
		return errors.Wrap(walimpls.ErrFenced, st.Message())
	}
	return err
}
