"""Messages into ConsumedMessage frames and back into the client's Consumed: every field
exactly as persisted, whatever a frame mixes (shared or own last-confirmed ids, empty and
full properties, unset and zero optional fields, large payloads)."""

from __future__ import annotations

import dataclasses

import pytest

from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.node.client import Consumed
from streamwal.node.client.answers import consumed_from
from streamwal.node.frames import batch_of, consumed_of
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.wal.message import ImmutableMessage, MessageType
from streamwal.wal.message.message_type import type_name


def _messages() -> list[ImmutableMessage]:
    shared = PulsarMessageId(7, 2)
    msgs = []
    for i in range(300):
        msgs.append(
            ImmutableMessage(
                message_id=PulsarMessageId(7, 10 + i, -1 if i % 3 else i % 5),
                type=MessageType.TIME_TICK if i % 50 == 0 else ("TimeTick", "", "x")[i % 3],
                payload=(b"%d" % i) * (4096 if i % 97 == 0 else 1),
                time_tick=(1 << 42) + i,
                # runs sharing one id object, then ids of their own (equal or not)
                last_confirmed=shared if i < 100 else PulsarMessageId(7, 2 + i // 7),
                source=i % 3,
                vchannel="" if i % 2 else f"v{i % 4}",
                properties={} if i % 4 else {"k": str(i), "empty": "", "ü": "✓"},
                producer_id=(i % 2) if i % 5 == 0 else None,
                sequence=i if i % 5 == 0 else None,
                txn_id=0 if i % 11 == 0 else (i if i % 13 == 0 else None),
                term=i % 4,
            )
        )
    return msgs


def _expected(msg: ImmutableMessage) -> Consumed:
    return Consumed(
        msg.message_id.to_bytes(),
        str(msg.message_id),
        msg.time_tick,
        type_name(msg.type),
        msg.payload,
        msg.vchannel,
        dict(msg.properties),
        msg.source,
        msg.producer_id,
        msg.sequence,
        msg.txn_id,
        msg.is_wal_record,
        msg.term,
    )


def test_a_frame_of_many_messages_round_trips_every_field() -> None:
    msgs = _messages()
    wire = batch_of(msgs).SerializeToString()
    frame = pb.ConsumedBatch.FromString(wire)
    assert [consumed_from(m) for m in frame.messages] == [_expected(m) for m in msgs]
    assert [m.last_confirmed_id for m in frame.messages] == [
        m.last_confirmed.to_bytes() for m in msgs
    ]


def _with_constructor(msg: ImmutableMessage) -> pb.ConsumedMessage:
    """Every field through the constructor, unset optional ones as ``None``."""
    return pb.ConsumedMessage(
        message_id=msg.message_id.to_bytes(),
        message_id_text=str(msg.message_id),
        time_tick=msg.time_tick,
        type=type_name(msg.type),
        payload=msg.payload,
        vchannel=msg.vchannel,
        properties=dict(msg.properties),
        source_node_id=msg.source,
        last_confirmed_id=msg.last_confirmed.to_bytes(),
        producer_id=msg.producer_id,
        sequence=msg.sequence,
        txn_id=msg.txn_id,
        wal_record=msg.is_wal_record,
        term=msg.term,
    )


def test_the_frame_is_what_a_message_by_message_build_gives() -> None:
    msgs = _messages()
    reference = pb.ConsumedBatch(messages=[_with_constructor(m) for m in msgs])
    assert batch_of(msgs).SerializeToString(deterministic=True) == reference.SerializeToString(
        deterministic=True
    )
    one_by_one = pb.ConsumedBatch()
    for msg in msgs:
        consumed_of(msg, one_by_one.messages.add)
    assert batch_of(msgs) == one_by_one
    assert [consumed_of(m) for m in msgs] == list(one_by_one.messages)


def test_unset_optional_fields_stay_unset_and_zero_is_set() -> None:
    frame = batch_of(_messages()[:12])
    assert not frame.messages[1].HasField("producer_id")
    assert not frame.messages[1].HasField("txn_id")
    assert frame.messages[0].HasField("txn_id") and frame.messages[0].txn_id == 0
    assert frame.messages[10].HasField("producer_id") and frame.messages[10].producer_id == 0
    assert batch_of([]) == pb.ConsumedBatch()


def test_consumed_stays_a_frozen_value() -> None:
    msg = _messages()[5]
    consumed = consumed_from(consumed_of(msg))
    assert consumed == _expected(msg)
    assert repr(consumed) == repr(_expected(msg))
    with pytest.raises(dataclasses.FrozenInstanceError):
        consumed.payload = b"other"  # type: ignore[misc]
    assert dataclasses.replace(consumed, payload=b"x").payload == b"x"
