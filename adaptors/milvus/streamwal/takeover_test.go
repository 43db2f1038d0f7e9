//go:build test

package streamwal

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/options"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/types"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
)

// envOtherNode names a second node on the same broker and etcd.
const envOtherNode = "STREAMWAL_MILVUS_OTHER_NODE"

// TestTakeoverThroughTheAdaptor is what Milvus's framework does not cover: a second
// node takes a channel over with a higher term; the first one's appends are
// ErrFenced, every time; its stale term is refused; a read-only WAL on the first
// node reads what both owners wrote, with the ids their appends returned.
func TestTakeoverThroughTheAdaptor(t *testing.T) {
	first, second := os.Getenv(envNode), os.Getenv(envOtherNode)
	if first == "" || second == "" {
		t.Skipf("set %s and %s to two nodes on one broker and etcd", envNode, envOtherNode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	one, two := mustBuild(t, first), mustBuild(t, second)
	defer one.Close()
	defer two.Close()
	name := fmt.Sprintf("milvus_takeover_%08x", rand.Uint32())
	open := func(o walimpls.OpenerImpls, term int64, mode types.AccessMode) (walimpls.WALImpls, error) {
		return o.Open(ctx, &walimpls.OpenOption{Channel: types.PChannelInfo{Name: name, Term: term, AccessMode: mode}})
	}

	old, err := open(one, 1, types.AccessModeRW)
	require.NoError(t, err)
	before, err := old.Append(ctx, message.CreateTestEmptyInsertMesage(1, map[string]string{"id": "1"}))
	require.NoError(t, err)

	owner, err := open(two, 2, types.AccessModeRW)
	require.NoError(t, err)
	defer owner.Close()
	for i := 0; i < 3; i++ { // fenced forever, said every time
		_, err = old.Append(ctx, message.CreateTestEmptyInsertMesage(2, map[string]string{"id": "x"}))
		require.Truef(t, errors.Is(err, walimpls.ErrFenced), "append %d after the takeover: %v", i, err)
	}
	old.Close()
	after, err := owner.Append(ctx, message.CreateTestEmptyInsertMesage(3, map[string]string{"id": "3"}))
	require.NoError(t, err)
	require.True(t, before.LT(after))

	_, err = open(one, 1, types.AccessModeRW)
	require.Error(t, err, "a term below the channel's must be refused")

	reader, err := open(one, 2, types.AccessModeRO)
	require.NoError(t, err)
	defer reader.Close()
	s, err := reader.Read(ctx, walimpls.ReadOption{Name: "ro", DeliverPolicy: options.DeliverPolicyAll()})
	require.NoError(t, err)
	defer s.Close()
	for i, want := range []message.MessageID{before, after} {
		select {
		case msg, ok := <-s.Chan():
			if !ok { // Error blocks until the scanner ends: ask only once it has
				t.Fatalf("read-only scanner ended before message %d: %v", i, s.Error())
			}
			require.Truef(t, msg.MessageID().EQ(want), "message %d: %v, want %v", i, msg.MessageID(), want)
			require.Equal(t, message.MessageTypeInsert, msg.MessageType())
		case <-ctx.Done():
			t.Fatalf("read-only scanner: no message %d", i)
		}
	}
}

func mustBuild(t *testing.T, endpoint string) walimpls.OpenerImpls {
	t.Helper()
	o, err := NewOpenerBuilder(endpoint).Build()
	require.NoError(t, err)
	return o
}
