package streamwal

import (
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"go.uber.org/zap"

	"github.com/milvus-io/milvus/pkg/v2/proto/streamingpb"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/options"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/types"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls/helper"

	pb "streamwal/adaptors/milvus/streamingpb"
)

// closeTimeout bounds the RemoveChannel a read-write WAL's Close sends: Close has
// no context, and a node that does not answer must not hang Milvus's shutdown.
const closeTimeout = 10 * time.Second

// maxBatchMessages is the node's cap on ConsumeRequest.max_batch_messages.
const maxBatchMessages = 4096

var _ walimpls.WALImpls = (*wal)(nil)

type wal struct {
	*helper.WALHelper
	client        pb.StreamingNodeClient
	readOnlyReads bool
	closeOnce     sync.Once
}

func (w *wal) WALName() message.WALName { return WALName }

func (w *wal) mustBeRW(op string) {
	if w.Channel().AccessMode != types.AccessModeRW {
		panic(op + " on a wal that is not in read-write mode")
	}
}

// Append is one Produce: Milvus's payload and properties as they are, its message
// type's name as the node's opaque type. Milvus's vchannel stays in its "_vc"
// property; the node's own vchannel field is left empty (the whole pchannel).
func (w *wal) Append(ctx context.Context, msg message.MutableMessage) (message.MessageID, error) {
	w.mustBeRW("append")
	proto := msg.IntoMessageProto()
	resp, err := w.client.Produce(ctx, &pb.ProduceRequest{
		Pchannel: w.Channel().Name,
		Message: &pb.Message{
			Type:       msg.MessageType().String(),
			Payload:    proto.GetPayload(),
			Properties: proto.GetProperties(),
		},
	})
	if err != nil {
		return nil, appendError(err)
	}
	id, err := NewMessageID(resp.GetMessageId())
	if err != nil {
		return nil, err
	}
	return id, nil
}

// Read is one ConsumeBatch stream with the same policy; ReadAheadBufferSize bounds
// the messages of one frame.
func (w *wal) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.ScannerImpls, error) {
	policy, err := deliveryPolicy(opt.DeliverPolicy)
	if err != nil {
		return nil, err
	}
	req := &pb.ConsumeRequest{
		Pchannel: w.Channel().Name,
		Policy:   policy,
		ReadOnly: w.readOnlyReads,
	}
	if opt.ReadAheadBufferSize > 0 {
		req.MaxBatchMessages = uint32(min(opt.ReadAheadBufferSize, maxBatchMessages))
	}
	return newScanner(opt.Name, w.client, req), nil
}

func deliveryPolicy(policy options.DeliverPolicy) (*pb.DeliveryPolicy, error) {
	switch p := policy.GetPolicy().(type) {
	case *streamingpb.DeliverPolicy_All:
		return &pb.DeliveryPolicy{Policy: &pb.DeliveryPolicy_All{All: &pb.Empty{}}}, nil
	case *streamingpb.DeliverPolicy_Latest:
		return &pb.DeliveryPolicy{Policy: &pb.DeliveryPolicy_Latest{Latest: &pb.Empty{}}}, nil
	case *streamingpb.DeliverPolicy_StartFrom:
		id, err := UnmarshalMessageID(p.StartFrom.GetId())
		if err != nil {
			return nil, err
		}
		return &pb.DeliveryPolicy{Policy: &pb.DeliveryPolicy_StartFrom{StartFrom: id.Bytes()}}, nil
	case *streamingpb.DeliverPolicy_StartAfter:
		id, err := UnmarshalMessageID(p.StartAfter.GetId())
		if err != nil {
			return nil, err
		}
		return &pb.DeliveryPolicy{Policy: &pb.DeliveryPolicy_StartAfter{StartAfter: id.Bytes()}}, nil
	default:
		return nil, errors.Newf("streamwal: deliver policy %T is not one of walimpls's four", p)
	}
}

// Truncate is Truncate(up_to=id): the node discards every message up to and
// including id (Milvus's "inclusive"), clamped to registered consumers' checkpoints.
func (w *wal) Truncate(ctx context.Context, id message.MessageID) error {
	w.mustBeRW("truncate")
	sid, ok := id.(MessageID)
	if !ok {
		return errors.Wrapf(message.ErrInvalidMessageID, "streamwal: not a streamwal id: %v", id)
	}
	_, err := w.client.Truncate(ctx, &pb.TruncateRequest{Pchannel: w.Channel().Name, UpTo: sid.Bytes()})
	return appendError(err)
}

// Close of a read-write WAL gives the channel up on the node (RemoveChannel), as
// Milvus's backends close their producer; a read-only one holds nothing.
func (w *wal) Close() {
	w.closeOnce.Do(func() {
		if w.Channel().AccessMode != types.AccessModeRW {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if _, err := w.client.RemoveChannel(ctx, &pb.RemoveChannelRequest{Pchannel: w.Channel().Name}); err != nil {
			w.Log().Warn("streamwal: remove channel on close failed", zap.Error(err))
		}
	})
}
