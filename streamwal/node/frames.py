"""Persisted messages as the ``ConsumedMessage`` a reader gets (``Consume``, ``ConsumeBatch``).

Every message a reader gets goes through here, so the conversion is written for its
cost per message: fields are set one by one on a message the frame adds in place (the
protobuf constructor's keyword arguments, and explicit ``None`` for unset optional
fields, cost more), fields at their default are left alone (proto3 writes nothing for
them either way), and a frame
encodes a last-confirmed id once for the messages in a row that share it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from streamwal.node.proto import streaming_pb2 as pb
from streamwal.wal.message import ImmutableMessage, MessageType
from streamwal.wal.message_id import MessageId

__all__ = ["batch_of", "consumed_of"]


def consumed_of(
    msg: ImmutableMessage,
    make: Callable[[], pb.ConsumedMessage] = pb.ConsumedMessage,
) -> pb.ConsumedMessage:
    """``msg`` as sent; ``make`` may add it to a batch in place (``batch.messages.add``),
    which saves copying it there."""
    return _fill(make(), msg, msg.last_confirmed.to_bytes())


def batch_of(msgs: Iterable[ImmutableMessage]) -> pb.ConsumedBatch:
    """One ``ConsumeBatch`` frame carrying ``msgs``, in order."""
    frame = pb.ConsumedBatch()
    add = frame.messages.add
    confirmed: MessageId | None = None
    confirmed_bytes = b""
    for msg in msgs:
        if msg.last_confirmed is not confirmed:  # messages appended together share it
            confirmed = msg.last_confirmed
            confirmed_bytes = confirmed.to_bytes()
        _fill(add(), msg, confirmed_bytes)
    return frame


def _fill(
    consumed: pb.ConsumedMessage, msg: ImmutableMessage, last_confirmed: bytes
) -> pb.ConsumedMessage:
    message_id = msg.message_id
    consumed.message_id = message_id.to_bytes()
    consumed.message_id_text = str(message_id)
    consumed.time_tick = msg.time_tick
    kind = msg.type
    if isinstance(kind, MessageType):
        consumed.type = kind.wire_name
        consumed.wal_record = True
    else:
        consumed.type = kind
    if msg.term:
        consumed.term = msg.term
    consumed.payload = msg.payload
    if msg.vchannel:
        consumed.vchannel = msg.vchannel
    consumed.source_node_id = msg.source
    consumed.last_confirmed_id = last_confirmed
    if msg.producer_id is not None:
        consumed.producer_id = msg.producer_id
    if msg.sequence is not None:
        consumed.sequence = msg.sequence
    if msg.txn_id is not None:
        consumed.txn_id = msg.txn_id
    if msg.properties:
        consumed.properties.update(msg.properties)
    return consumed
