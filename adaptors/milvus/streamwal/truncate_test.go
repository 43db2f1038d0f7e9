//go:build test

package streamwal

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/options"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/types"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
)

// TestTruncateThroughTheAdaptor checks what Milvus's framework only calls: Truncate(id)
// discards id too (inclusive), a read with "all" starts at the first message kept,
// and a read from a discarded id fails with the node's OUT_OF_RANGE.
func TestTruncateThroughTheAdaptor(t *testing.T) {
	endpoint := os.Getenv(envNode)
	if endpoint == "" {
		t.Skipf("set %s=host:port of a running streamwal node", envNode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	o := mustBuild(t, endpoint)
	defer o.Close()
	name := fmt.Sprintf("milvus_truncate_%08x", rand.Uint32())
	w, err := o.Open(ctx, &walimpls.OpenOption{Channel: types.PChannelInfo{Name: name, Term: 1, AccessMode: types.AccessModeRW}})
	require.NoError(t, err)
	defer w.Close()
	ids := make([]message.MessageID, 3)
	for i := range ids {
		ids[i], err = w.Append(ctx, message.CreateTestEmptyInsertMesage(int64(i), map[string]string{"id": fmt.Sprint(i)}))
		require.NoError(t, err)
	}
	require.NoError(t, w.Truncate(ctx, ids[1]))

	all, err := w.Read(ctx, walimpls.ReadOption{Name: "all", DeliverPolicy: options.DeliverPolicyAll()})
	require.NoError(t, err)
	defer all.Close()
	select {
	case msg, ok := <-all.Chan():
		if !ok {
			t.Fatalf("read from all ended: %v", all.Error())
		}
		require.Truef(t, msg.MessageID().EQ(ids[2]), "all starts at %v, want %v (the first not truncated)", msg.MessageID(), ids[2])
	case <-ctx.Done():
		t.Fatal("read from all: no message")
	}

	from, err := w.Read(ctx, walimpls.ReadOption{Name: "from", DeliverPolicy: options.DeliverPolicyStartFrom(ids[1])})
	require.NoError(t, err)
	defer from.Close()
	select {
	case msg, ok := <-from.Chan():
		require.Falsef(t, ok, "a read from a truncated id delivered %v", msg)
		require.Equal(t, codes.OutOfRange, status.Code(from.Error()), "%v", from.Error())
	case <-ctx.Done():
		t.Fatal("a read from a truncated id neither failed nor delivered")
	}
}
