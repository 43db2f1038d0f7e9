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

func parseProduce(b []byte) (produce, bool) {
	p := produce{coalesces: true}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return p, false
		}
		b = b[n:]
		switch {
		case num == fieldPchannel && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return p, false
			}
			p.pchannel = string(v)
			b = b[m:]
		case num == fieldMessage && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return p, false
			}
			p.message, p.hasMsg = v, true
			b = b[m:]
		case (num == fieldProducer || num == fieldSequence) && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return p, false
			}
			p.ids = protowire.AppendTag(p.ids, num-fieldProducer+1, protowire.VarintType)
			p.ids = protowire.AppendVarint(p.ids, v)
			b = b[m:]
		default:
			p.coalesces = false
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return p, false
			}
			b = b[m:]
		}
	}
	return p, true
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
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errors.New("front: malformed ProduceBatchResponse")
		}
		b = b[n:]
		if num != fieldResults || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return nil, errors.New("front: malformed ProduceBatchResponse")
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return nil, errors.New("front: malformed ProduceBatchResponse")
		}
		b = b[m:]
		a, err := parseAnswer(v)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func parseAnswer(b []byte) (answer, error) {
	a := answer{response: b}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return a, errors.New("front: malformed ProduceResponse")
		}
		b = b[n:]
		if num == fieldError && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return a, errors.New("front: malformed ProduceResponse")
			}
			a.failed = true
			if err := parseError(v, &a); err != nil {
				return a, err
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return a, errors.New("front: malformed ProduceResponse")
		}
		b = b[m:]
	}
	return a, nil
}

func parseError(b []byte, a *answer) error {
	bad := errors.New("front: malformed AppendError")
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return bad
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return bad
		}
		value := b[:m]
		b = b[m:]
		switch {
		case num == fieldErrCode && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(value)
			a.code = uint32(v)
		case num == fieldErrText && typ == protowire.BytesType:
			v, _ := protowire.ConsumeBytes(value)
			a.text = string(v)
		case num == fieldErrOutcom && typ == protowire.VarintType:
			a.outcome, _ = protowire.ConsumeVarint(value)
		}
	}
	return nil
}
