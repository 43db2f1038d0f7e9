"""Appends sent with a receipt on each segment's edges, not on every message.

Why: the client's binding calls a Python callback for every message, on its I/O
thread, and each call takes the GIL from the event loop's thread in the middle of its
work (two context switches, and the loop's own sends slowed down meanwhile), for every
append (what that cost: docs/performance.md, "What the design choices save").

How every message still gets its own id: a channel's appends go to its producer in
order, cut into segments (at most :data:`SEGMENT_MESSAGES` messages or about
:data:`SEGMENT_BYTES`, and never past the end of an event-loop iteration), and only
a segment's first and last messages carry a callback. A segment's messages sit in the
producer's batches in order and contiguous. The producer closes a batch on its own
(its batching delay, or a size bound), so a segment lands in one entry, or in two
when a batch was closed while it was being sent. :func:`positions` accepts exactly
these two shapes, checked against the edges' ids: one entry whose batch indexes span
the segment, or two consecutive entries, the segment's first messages ending the
first (its batch size, kept in the id's serialized form, must say so: a middle batch
that failed alone takes no entry) and the rest from index 0 of the next. A segment is
sent in well under the 1 ms batching delay, so a second cut needs the loop thread
stalled for about that long in the middle of one. Then the channel reads the log
between the edges and takes the ids from there if it holds the segment's payloads in
order; later receipts wait for that read, because it also answers the interleaving
guard's question. If the log holds anything else there (a missing message, another
producer's), nothing after the first edge is acknowledged: those appends get
:class:`~streamwal.errors.UnknownPositionError` (neither acknowledged nor retried) and the
owner stops writing, as when the guard sees another producer's entry. Edges with
different outcomes (say, fenced in the middle) answer for themselves, and the middle
gets the unknown position.

The client could also refuse a message silently on its way in (its callback is the
only way it says so): when the producer is closed, which fails the segment's last
message too, or over its pending-message limit, which the channel keeps below by
counting its own appends in flight. (The client's memory limit, the other such case,
is not set by this backend.) Flushing the batch after each segment would spare the
timer but cannot be done safely: the binding's ``flush_async`` holds the GIL while it
waits for the producer's lock, which the client's I/O thread may hold while it waits
for the GIL (a deadlock, seen in a benchmark run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.wal.backend import AppendCallback

__all__ = [
    "SEGMENT_BYTES",
    "SEGMENT_MESSAGES",
    "Edge",
    "Prepared",
    "Segment",
    "Single",
    "batch_size",
    "positions",
    "size_of",
]

#: Bounds of one segment: sent in a few hundred microseconds (appenders' own work
#: included), and an eighth of the producer's batch size bound, so a segment is cut at
#: most once in practice. 32 appenders: 4 receipts a round instead of 32.
SEGMENT_MESSAGES = 16
SEGMENT_BYTES = 64 * 1024

#: (callback, built client message, payload, size in bytes, properties)
Prepared = tuple[AppendCallback, Any, bytes, int, Mapping[str, str]]


def size_of(payload: bytes, properties: Mapping[str, str]) -> int:
    """What a message adds to a batch, counted high (payload, keys, values, framing)."""
    size = len(payload) + 16
    for key, value in properties.items():
        size += len(key) + len(value) + 4
    return size


def batch_size(message_id: Any) -> int | None:
    """How many messages the batch of a receipt's id holds, if the id says so.

    The client keeps it in the id's serialized form (``MessageIdData.batch_size``,
    protobuf field 6) but has no accessor for it.
    """
    try:
        data = message_id.serialize()
        return _batch_size_field(data)
    except Exception:  # no serialized form, or not one this parser knows
        return None


def _batch_size_field(data: bytes) -> int | None:
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            if field == 6:
                return value
        elif wire == 2:
            length, at = _varint(data, at)
            at += length
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            return None
    return None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def positions(first: Any, last: Any, count: int) -> list[PulsarMessageId] | None:
    """Every id of a segment of ``count`` >= 2 messages from its edges' ids, or ``None``
    when the edges do not prove one of the two shapes in the module doc."""
    ledger, first_entry, first_index = first.ledger_id(), first.entry_id(), first.batch_index()
    last_entry, last_index = last.entry_id(), last.batch_index()
    if ledger < 0 or first_entry < 0 or last.ledger_id() != ledger:
        return None
    if last_entry == first_entry:
        if first_index >= 0 and last_index - first_index == count - 1:
            return [PulsarMessageId(ledger, first_entry, first_index + i) for i in range(count)]
        return None
    if last_entry != first_entry + 1:
        return None
    # one cut: the segment's first `head` messages end one entry, the rest open the next
    # (a batch of one may come back without a batch index)
    tail = last_index + 1 if last_index >= 0 else 1
    head = count - tail
    if head < 1 or (head > 1 and first_index < 0):
        return None
    # the first entry must end with the head: a batch of the middle that failed on its
    # own (and so took no entry) would otherwise shift every id after it
    if first_index >= 0 and batch_size(first) != first_index + head:
        return None
    ids = [PulsarMessageId(ledger, first_entry, first_index + i) for i in range(head)]
    if tail == 1:
        ids.append(PulsarMessageId(ledger, last_entry, last_index))
    else:
        ids.extend(PulsarMessageId(ledger, last_entry, i) for i in range(tail))
    return ids


class Segment:
    """One segment in flight: its entries' callbacks and what its two edges reported.

    An edge's outcome is ``(result, message_id)`` from a receipt, or the exception
    its ``send_async`` raised. ``broken`` marks a segment a message of which was refused
    while being handed over: its batch indexes no longer match the entries.
    """

    __slots__ = ("broken", "dones", "first", "last", "payloads", "properties")

    def __init__(
        self,
        dones: list[AppendCallback | None],
        payloads: list[bytes],
        properties: list[Mapping[str, str]],
    ) -> None:
        self.dones = dones
        #: kept to recognise the segment's messages if it must be read back
        self.payloads = payloads
        self.properties = properties
        self.first: tuple[Any, Any] | BaseException | None = None
        self.last: tuple[Any, Any] | BaseException | None = None
        self.broken = False

    def record(self, is_last: bool, outcome: tuple[Any, Any] | BaseException) -> bool:
        """Store one edge's outcome; true once both are in."""
        if is_last:
            self.last = outcome
        else:
            self.first = outcome
        return self.first is not None and self.last is not None


class Edge:
    """The token a segment's first or last message carries to its receipt."""

    __slots__ = ("is_last", "segment")

    def __init__(self, segment: Segment, is_last: bool) -> None:
        self.segment = segment
        self.is_last = is_last


class Single:
    """The token of an append sent alone (not in a segment): its payload and properties
    are kept to recognise it in the log if its receipt comes back without a position."""

    __slots__ = ("done", "payload", "properties")

    def __init__(self, done: AppendCallback, payload: bytes, properties: Mapping[str, str]) -> None:
        self.done = done
        self.payload = payload
        self.properties = properties
