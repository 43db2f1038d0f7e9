package main

// The few protobuf fields the front reads and writes, at the wire level: the front
// forwards every message as bytes and never needs the node's generated types. Field
// numbers are those of streamwal/node/proto/streaming.proto.

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec passes messages through as bytes: the front parses only what it routes on.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, errors.New("front: only raw frames are sent")
	}
	return f.data, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return errors.New("front: only raw frames are received")
	}
	f.data = append(f.data[:0], data...)
	return nil
}

type frame struct{ data []byte }

// produce is what the front needs of a ProduceRequest: the channel, the message's
// bytes, and whether it may be coalesced (no idempotence or transaction field, no
// field this front does not know: those go to the node as they came).
type produce struct {
	pchannel  string
	message   []byte
	hasMsg    bool
	coalesces bool
	// the idempotence numbers, kept as their wire bytes (fields 1 and 2 of AppendIds)
	ids []byte
}

const (
	fieldPchannel  = 1
	fieldMessage   = 2
	fieldMessages  = 2 // ProduceBatchRequest.messages
	fieldIndep     = 3 // ProduceBatchRequest.independent
	fieldIds       = 5 // ProduceBatchRequest.ids
	fieldProducer  = 40
	fieldSequence  = 41
	fieldResults   = 1 // ProduceBatchResponse.results
	fieldError     = 4 // ProduceResponse.error
	fieldErrCode   = 1 // AppendError.code
	fieldErrText   = 2 // AppendError.message
	fieldErrOutcom = 3 // AppendError.outcome
)

// eachField calls visit with every field of the message b (its value's wire bytes:
// a varint, or a length-prefixed run); false when b is malformed.
func eachField(b []byte, visit func(num protowire.Number, typ protowire.Type, value []byte)) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false
		}
		visit(num, typ, b[:m])
		b = b[m:]
	}
	return true
}

func varint(value []byte) uint64 {
	v, _ := protowire.ConsumeVarint(value)
	return v
}

func lengthPrefixed(value []byte) []byte {
	v, _ := protowire.ConsumeBytes(value)
	return v
}

func parseProduce(b []byte) (produce, bool) {
	p := produce{coalesces: true}
	ok := eachField(b, func(num protowire.Number, typ protowire.Type, value []byte) {
		switch {
		case num == fieldPchannel && typ == protowire.BytesType:
			p.pchannel = string(lengthPrefixed(value))
		case num == fieldMessage && typ == protowire.BytesType:
			p.message, p.hasMsg = lengthPrefixed(value), true
		case (num == fieldProducer || num == fieldSequence) && typ == protowire.VarintType:
			p.ids = protowire.AppendTag(p.ids, num-fieldProducer+1, protowire.VarintType)
			p.ids = protowire.AppendVarint(p.ids, varint(value))
		default:
			p.coalesces = false
		}
	})
	return p, ok
}

// batchFrame is a ProduceBatchRequest of separate appends (independent: each is
// answered alone, an invalid one does not refuse the others).
func batchFrame(pchannel string, messages [][]byte, ids [][]byte) []byte {
	size := len(pchannel) + 8
	numbered := false
	for i, m := range messages {
		size += len(m) + len(ids[i]) + 8
		numbered = numbered || len(ids[i]) > 0
	}
	b := make([]byte, 0, size)
	b = protowire.AppendTag(b, fieldPchannel, protowire.BytesType)
	b = protowire.AppendString(b, pchannel)
	for _, m := range messages {
		b = protowire.AppendTag(b, fieldMessages, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	b = protowire.AppendTag(b, fieldIndep, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	if numbered { // one entry per message, empty for a plain append
		for _, id := range ids {
			b = protowire.AppendTag(b, fieldIds, protowire.BytesType)
			b = protowire.AppendBytes(b, id)
		}
	}
	return b
}

// answer is one message's result in a ProduceBatchResponse: the ProduceResponse's
// bytes when it landed, else its error.
type answer struct {
	response []byte
	failed   bool
	code     uint32
	text     string
	outcome  uint64
}

// batchAnswers splits a ProduceBatchResponse into its per-message results. The front
// never asks for the compact form, so every message has its own.
func batchAnswers(b []byte) ([]answer, error) {
	var out []answer
	whole := true
	ok := eachField(b, func(num protowire.Number, typ protowire.Type, value []byte) {
		if num == fieldResults && typ == protowire.BytesType {
			a, fine := parseAnswer(lengthPrefixed(value))
			out = append(out, a)
			whole = whole && fine
		}
	})
	if !ok || !whole {
		return nil, errors.New("front: malformed ProduceBatchResponse")
	}
	return out, nil
}

// parseAnswer reads one ProduceResponse; false when it or its error is malformed.
func parseAnswer(b []byte) (answer, bool) {
	a := answer{response: b}
	errorWhole := true
	ok := eachField(b, func(num protowire.Number, typ protowire.Type, value []byte) {
		if num == fieldError && typ == protowire.BytesType {
			a.failed = true
			errorWhole = parseError(lengthPrefixed(value), &a)
		}
	})
	return a, ok && errorWhole
}

func parseError(b []byte, a *answer) bool {
	return eachField(b, func(num protowire.Number, typ protowire.Type, value []byte) {
		switch {
		case num == fieldErrCode && typ == protowire.VarintType:
			a.code = uint32(varint(value))
		case num == fieldErrText && typ == protowire.BytesType:
			a.text = string(lengthPrefixed(value))
		case num == fieldErrOutcom && typ == protowire.VarintType:
			a.outcome = varint(value)
		}
	})
}
