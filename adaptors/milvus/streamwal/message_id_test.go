package streamwal

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
)

func pulsarBytes(ledger, entry int64, batch int32) []byte {
	raw := make([]byte, pulsarIDSize)
	binary.BigEndian.PutUint64(raw[0:8], uint64(ledger))
	binary.BigEndian.PutUint64(raw[8:16], uint64(entry))
	binary.BigEndian.PutUint32(raw[16:20], uint32(batch))
	return raw
}

func mustID(t *testing.T, raw []byte) MessageID {
	t.Helper()
	id, err := NewMessageID(raw)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestMessageIDOrdersLikeTheLog(t *testing.T) {
	// in log order: an entry outside a batch (-1) comes before the indexes of the next
	ids := []MessageID{
		mustID(t, pulsarBytes(7, 0, -1)),
		mustID(t, pulsarBytes(7, 1, 0)),
		mustID(t, pulsarBytes(7, 1, 1)),
		mustID(t, pulsarBytes(7, 2, -1)),
		mustID(t, pulsarBytes(8, 0, -1)),
		mustID(t, pulsarBytes(1<<40, 0, -1)),
	}
	for i := range ids {
		for j := range ids {
			if got := ids[i].LT(ids[j]); got != (i < j) {
				t.Errorf("%v.LT(%v) = %v", ids[i], ids[j], got)
			}
			if got := ids[i].LTE(ids[j]); got != (i <= j) {
				t.Errorf("%v.LTE(%v) = %v", ids[i], ids[j], got)
			}
			if got := ids[i].EQ(ids[j]); got != (i == j) {
				t.Errorf("%v.EQ(%v) = %v", ids[i], ids[j], got)
			}
		}
	}
	if got := ids[1].String(); got != "7:1:0" {
		t.Errorf("String() = %q", got)
	}
	if got := ids[0].String(); got != "7:0" {
		t.Errorf("String() = %q", got)
	}
}

func TestMessageIDRoundTripsTheNodesBytes(t *testing.T) {
	raw := pulsarBytes(12, 34, 5)
	id := mustID(t, raw)
	back, err := UnmarshalMessageID(id.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !back.EQ(id) || string(back.Bytes()) != string(raw) {
		t.Errorf("round trip: %v -> %v", id, back)
	}
	if proto := id.IntoProto(); proto.GetId() != id.Marshal() {
		t.Errorf("IntoProto().Id = %q", proto.GetId())
	}
	memory := mustID(t, []byte{0, 0, 0, 0, 0, 0, 1, 0})
	if memory.String() != "256" || !mustID(t, []byte{0, 0, 0, 0, 0, 0, 0, 255}).LT(memory) {
		t.Errorf("in-memory ids: %v", memory)
	}
}

func TestMessageIDRefusesOtherBytes(t *testing.T) {
	for _, raw := range [][]byte{nil, make([]byte, 19), make([]byte, 21)} {
		if _, err := NewMessageID(raw); !errors.Is(err, message.ErrInvalidMessageID) {
			t.Errorf("%d bytes: %v", len(raw), err)
		}
	}
	if _, err := UnmarshalMessageID("not base64!"); !errors.Is(err, message.ErrInvalidMessageID) {
		t.Errorf("not base64: %v", err)
	}
}
