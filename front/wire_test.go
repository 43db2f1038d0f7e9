package main

import (
	"bytes"
	"regexp"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// request builds a ProduceRequest's wire bytes field by field.
func request(fields ...func([]byte) []byte) []byte {
	var b []byte
	for _, f := range fields {
		b = f(b)
	}
	return b
}

func str(num protowire.Number, v string) func([]byte) []byte {
	return func(b []byte) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
}

func num(n protowire.Number, v uint64) func([]byte) []byte {
	return func(b []byte) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), v)
	}
}

func TestAPlainProduceIsCoalescedWithItsChannelAndMessage(t *testing.T) {
	p, ok := parseProduce(request(str(fieldPchannel, "orders"), str(fieldMessage, "msg")))
	if !ok || !p.coalesces || !p.hasMsg || p.pchannel != "orders" || string(p.message) != "msg" {
		t.Fatalf("parsed %+v, ok %v", p, ok)
	}
	if len(p.ids) != 0 {
		t.Fatalf("a plain append carries no ids: %x", p.ids)
	}
}

func TestIdempotenceNumbersBecomeTheMessagesOwnIds(t *testing.T) {
	p, ok := parseProduce(request(
		str(fieldPchannel, "c"), str(fieldMessage, "m"), num(fieldProducer, 7), num(fieldSequence, 300),
	))
	if !ok || !p.coalesces {
		t.Fatalf("parsed %+v, ok %v", p, ok)
	}
	want := request(num(1, 7), num(2, 300)) // AppendIds: producer_id = 1, sequence = 2
	if !bytes.Equal(p.ids, want) {
		t.Fatalf("ids %x, want %x", p.ids, want)
	}
}

func TestAFieldTheFrontDoesNotKnowIsForwardedNotCoalesced(t *testing.T) {
	for name, extra := range map[string]func([]byte) []byte{
		"txn_id":   num(3, 9),
		"unknown":  str(99, "x"),
		"bad type": num(fieldPchannel, 1), // the channel as a varint: not what it should be
	} {
		p, ok := parseProduce(request(str(fieldPchannel, "c"), str(fieldMessage, "m"), extra))
		if !ok || p.coalesces {
			t.Errorf("%s: coalesces %v, ok %v", name, p.coalesces, ok)
		}
	}
}

func TestMalformedBytesAreSaidSo(t *testing.T) {
	whole := request(str(fieldPchannel, "orders"), str(fieldMessage, "msg"))
	for _, cut := range []int{1, 3, len(whole) - 1} {
		if _, ok := parseProduce(whole[:cut]); ok {
			t.Errorf("a request cut at %d of %d bytes parsed", cut, len(whole))
		}
	}
	if _, err := batchAnswers([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Error("a cut answer was taken")
	}
}

// fieldsOf lists a message's fields in order: number and raw value.
func fieldsOf(t *testing.T, b []byte) (nums []protowire.Number, values [][]byte) {
	t.Helper()
	if !eachField(b, func(n protowire.Number, _ protowire.Type, v []byte) {
		nums, values = append(nums, n), append(values, v)
	}) {
		t.Fatalf("malformed: %x", b)
	}
	return nums, values
}

func TestAFrameIsIndependentAppendsWithIdsOnlyWhenNumbered(t *testing.T) {
	plain := batchFrame("c", [][]byte{[]byte("a"), []byte("b")}, [][]byte{nil, nil})
	nums, values := fieldsOf(t, plain)
	wantNums := []protowire.Number{fieldPchannel, fieldMessages, fieldMessages, fieldIndep}
	if len(nums) != len(wantNums) {
		t.Fatalf("fields %v, want %v", nums, wantNums)
	}
	for i := range nums {
		if nums[i] != wantNums[i] {
			t.Fatalf("fields %v, want %v", nums, wantNums)
		}
	}
	if varint(values[3]) != 1 || string(lengthPrefixed(values[1])) != "a" {
		t.Fatalf("values %q", values)
	}
	ids := request(num(1, 7), num(2, 1))
	numbered := batchFrame("c", [][]byte{[]byte("a"), []byte("b")}, [][]byte{nil, ids})
	nums, values = fieldsOf(t, numbered)
	if len(nums) != 6 || nums[4] != fieldIds || nums[5] != fieldIds {
		t.Fatalf("fields %v: one ids entry per message", nums)
	}
	if len(lengthPrefixed(values[4])) != 0 || !bytes.Equal(lengthPrefixed(values[5]), ids) {
		t.Fatalf("ids %q: empty for the plain one, in message order", values[4:])
	}
}

func TestAnswersKeepTheResponseBytesOrTheError(t *testing.T) {
	landed := request(str(1, "id"), num(3, 42)) // a ProduceResponse without an error
	appendErr := request(num(fieldErrCode, 9), str(fieldErrText, "fenced"), num(fieldErrOutcom, 2))
	failed := request(str(fieldError, string(appendErr)))
	batch := request(str(fieldResults, string(landed)), str(fieldResults, string(failed)))
	got, err := batchAnswers(batch)
	if err != nil || len(got) != 2 {
		t.Fatalf("answers %+v, err %v", got, err)
	}
	if got[0].failed || !bytes.Equal(got[0].response, landed) {
		t.Errorf("landed: %+v", got[0])
	}
	if !got[1].failed || got[1].code != 9 || got[1].text != "fenced" || got[1].outcome != 2 {
		t.Errorf("failed: %+v", got[1])
	}
}

func TestOnlyASampledCallersTraceIsForwardedAlone(t *testing.T) {
	for tp, want := range map[string]bool{
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01": true,
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03": true,
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00": false,
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02": false,
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz": false,
		"garbage": false,
	} {
		if got := sampled(metadata.Pairs("traceparent", tp)); got != want {
			t.Errorf("sampled(%q) = %v, want %v", tp, got, want)
		}
	}
	if sampled(metadata.MD{}) {
		t.Error("no trace context is not a sampled one")
	}
	parent := unsampledParent()
	if !regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-00$`).MatchString(parent) {
		t.Errorf("unsampledParent() = %q", parent)
	}
	if sampled(metadata.Pairs("traceparent", parent)) {
		t.Error("the front's own frames would be forwarded as sampled")
	}
}
