package streamwal

import (
	"github.com/cockroachdb/errors"

	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls/helper"

	pb "streamwal/adaptors/milvus/streamingpb"
)

var _ walimpls.ScannerImpls = (*scanner)(nil)

type scanner struct {
	*helper.ScannerHelper
	ch chan message.ImmutableMessage
}

func newScanner(name string, client pb.StreamingNodeClient, req *pb.ConsumeRequest) *scanner {
	s := &scanner{ScannerHelper: helper.NewScannerHelper(name), ch: make(chan message.ImmutableMessage, 1)}
	go s.run(client, req)
	return s
}

func (s *scanner) Chan() <-chan message.ImmutableMessage { return s.ch }

// run delivers what the node sends, in its order, except the records the WAL wrote
// itself (wal_record: its time ticks and transaction markers), which are not
// Milvus's. It ends with nil when the scanner is closed, or with the stream's error.
func (s *scanner) run(client pb.StreamingNodeClient, req *pb.ConsumeRequest) {
	defer close(s.ch)
	ctx := s.Context()
	stream, err := client.ConsumeBatch(ctx, req)
	if err != nil {
		s.finish(err)
		return
	}
	for {
		batch, err := stream.Recv()
		if err != nil {
			s.finish(err)
			return
		}
		for _, m := range batch.GetMessages() {
			if m.GetWalRecord() {
				continue
			}
			id, err := NewMessageID(m.GetMessageId())
			if err != nil {
				s.finish(err)
				return
			}
			select {
			case s.ch <- message.NewImmutableMesasge(id, m.GetPayload(), m.GetProperties()):
			case <-ctx.Done():
				s.Finish(nil)
				return
			}
		}
	}
}

// finish ends the scanner: with nil when it was closed (the stream's cancellation
// is the close, not a failure), with err otherwise.
func (s *scanner) finish(err error) {
	if s.Context().Err() != nil {
		s.Finish(nil)
		return
	}
	s.Finish(errors.Wrapf(err, "streamwal: read %s", s.Name()))
}
