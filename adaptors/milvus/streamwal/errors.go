package streamwal

import (
	"strings"

	"github.com/cockroachdb/errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
)

// notFencedPrefixes start the details of the FAILED_PRECONDITIONs that are not a
// fence: the node's own set-up, a stale term (an open), a channel still served (a
// delete). streamwal/node/client_errors.py tells them apart alike.
var notFencedPrefixes = []string{"node misconfigured", "stale term", "channel in use"}

func isFence(details string) bool {
	for _, prefix := range notFencedPrefixes {
		if strings.HasPrefix(details, prefix) {
			return false
		}
	}
	return true
}

// appendError is a failed write (Produce, Truncate) as Milvus's contract has it: a
// fence is walimpls.ErrFenced, which tells Milvus to close this WAL and open a new
// one; anything else keeps its gRPC status (errors.Is/status.FromError still see it).
func appendError(err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.FailedPrecondition && isFence(st.Message()) {
		return errors.Wrap(walimpls.ErrFenced, st.Message())
	}
	return err
}
