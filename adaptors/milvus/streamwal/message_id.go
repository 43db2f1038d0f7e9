package streamwal

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/milvus-io/milvus-proto/go-api/v2/commonpb"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
)

// The byte forms of a node's message ids (docs/wire-format.md, "Message id byte
// forms"): a Pulsar position is big-endian (ledger int64, entry int64, batch index
// int32, -1 outside a batch); the in-memory backend's is one big-endian uint64 offset.
const (
	pulsarIDSize = 20
	memoryIDSize = 8
)

var _ message.MessageID = MessageID{}

// MessageID is a position in a streamwal channel: the bytes the node answers, kept
// as they are (the node takes them back verbatim in a read or a truncate) and
// decoded once so ids compare locally, without a call.
type MessageID struct {
	raw        string
	ledger     int64
	entry      int64
	batchIndex int32
}

// NewMessageID decodes the bytes a node answered as a message id.
func NewMessageID(raw []byte) (MessageID, error) {
	switch len(raw) {
	case pulsarIDSize:
		return MessageID{
			raw:        string(raw),
			ledger:     int64(binary.BigEndian.Uint64(raw[0:8])),
			entry:      int64(binary.BigEndian.Uint64(raw[8:16])),
			batchIndex: int32(binary.BigEndian.Uint32(raw[16:20])),
		}, nil
	case memoryIDSize:
		// one log, one ledger: the offset orders like an entry
		return MessageID{raw: string(raw), entry: int64(binary.BigEndian.Uint64(raw)), batchIndex: -1}, nil
	default:
		return MessageID{}, errors.Wrapf(message.ErrInvalidMessageID,
			"a streamwal message id is %d (Pulsar) or %d (in-memory) bytes, got %d",
			pulsarIDSize, memoryIDSize, len(raw))
	}
}

// UnmarshalMessageID reverses Marshal. It is not registered in Milvus's
// unmarshaler registry: WALName is Milvus's Pulsar name (see WALName), and a Milvus
// process that also links Milvus's own Pulsar backend has that name taken.
func UnmarshalMessageID(data string) (MessageID, error) {
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return MessageID{}, errors.Wrapf(message.ErrInvalidMessageID, "not base64: %q", data)
	}
	return NewMessageID(raw)
}

// Bytes is the id as the node answered it.
func (id MessageID) Bytes() []byte { return []byte(id.raw) }

// WALName is Milvus's Pulsar name: Milvus's WALName enum has no value for a backend
// of its own, and a streamwal channel is a Pulsar topic.
func (id MessageID) WALName() message.WALName { return WALName }

func (id MessageID) compare(other message.MessageID) int {
	o := other.(MessageID)
	switch {
	case id.ledger != o.ledger:
		return cmp64(id.ledger, o.ledger)
	case id.entry != o.entry:
		return cmp64(id.entry, o.entry)
	default:
		return cmp64(int64(id.batchIndex), int64(o.batchIndex))
	}
}

func cmp64(a, b int64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// LT orders like the log: by (ledger, entry, batch index).
func (id MessageID) LT(other message.MessageID) bool { return id.compare(other) < 0 }

// LTE orders like the log: by (ledger, entry, batch index).
func (id MessageID) LTE(other message.MessageID) bool { return id.compare(other) <= 0 }

// EQ is the same position.
func (id MessageID) EQ(other message.MessageID) bool { return id.compare(other) == 0 }

// Marshal is the node's bytes in base64 (Milvus carries ids as strings).
func (id MessageID) Marshal() string { return base64.StdEncoding.EncodeToString([]byte(id.raw)) }

// IntoProto is Milvus's wire form of the id.
func (id MessageID) IntoProto() *commonpb.MessageID {
	return &commonpb.MessageID{Id: id.Marshal(), WALName: commonpb.WALName(id.WALName())}
}

// String is the node's readable form: ledger:entry, or ledger:entry:batch inside a batch.
func (id MessageID) String() string {
	if len(id.raw) == memoryIDSize {
		return fmt.Sprintf("%d", id.entry)
	}
	if id.batchIndex < 0 {
		return fmt.Sprintf("%d:%d", id.ledger, id.entry)
	}
	return fmt.Sprintf("%d:%d:%d", id.ledger, id.entry, id.batchIndex)
}
