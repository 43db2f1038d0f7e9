"""Sending appends with segment receipts.

Appends are handed to the C++ producer's ``send_async`` in call order, from the loop
thread, so the order of ``submit`` calls is the order in the log and appends pipeline
without a round trip each. Only the edges of each segment of appends carry a send
callback (:mod:`.segments`); receipts come back in bursts (:mod:`.receipts`) and answer
each entry's callback directly. A fencing result from the broker marks the channel
fenced for good: the producer is dropped and every later append fails fast.

Every receipt passes the interleaving guard (:mod:`.state`) before its append is
acknowledged. A receipt without a position (``-1:-1``) is the broker's deduplication
answering a message the client sent again after a reconnect (a topic unloaded or moved
to another broker): the first copy is in the log, its receipt was lost with the
connection. Such appends are placed by reading the log on from the last position this
owner knows (:mod:`.readback`), so a topic move costs callers nothing; only when the
log does not hold them there are they answered with
:class:`~streamwal.errors.UnknownPositionError` (neither acknowledged nor retried).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any

import _pulsar

from streamwal.adaptors.pulsar.errors import translate
from streamwal.adaptors.pulsar.metrics import UNPLACED, record_segment
from streamwal.adaptors.pulsar.readback import ReadBack
from streamwal.adaptors.pulsar.receipts import ReceiptQueue
from streamwal.adaptors.pulsar.segments import (
    SEGMENT_BYTES,
    SEGMENT_MESSAGES,
    Edge,
    Prepared,
    Segment,
    Single,
    positions,
    size_of,
)
from streamwal.adaptors.pulsar.state import ChannelState, log
from streamwal.errors import (
    ClosedError,
    InvalidInputError,
    StreamwalError,
    UnavailableError,
    UnknownPositionError,
)
from streamwal.wal.backend import AppendCallback

__all__ = ["Sender"]


class Sender:
    """The append path: hand appends to the client in order, answer them from receipts;
    what receipts cannot place goes to the read-back."""

    def __init__(
        self, state: ChannelState, readback: ReadBack, on_first_in_flight: Callable[[], None]
    ) -> None:
        self._state = state
        self._readback = readback
        #: called when an append goes to the client with none in flight (.fencewatch)
        self._on_first_in_flight = on_first_in_flight
        #: the latest append, sent when the next one comes or the iteration ends
        self._held: Prepared | None = None
        #: the segment being sent (its first edge is out, its last is not yet)
        self._segment: Segment | None = None
        self._segment_bytes = 0
        self._receipts: ReceiptQueue[Single | Edge] = ReceiptQueue(self._on_receipt)

    def submit(self, payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        try:
            self._enqueue(done, payload, properties)
        except Exception as exc:
            done(None, exc)

    def _enqueue(self, done: AppendCallback, payload: bytes, properties: Mapping[str, str]) -> None:
        state = self._state
        state.check_open()
        if state.fenced is not None:
            raise state.fenced
        if state.producer is None:
            raise UnavailableError(
                f"channel {state.channel!r} has no producer; call ensure_writable first"
            )
        config = state.config
        if len(payload) > config.max_message_size:
            raise InvalidInputError(
                f"payload of {len(payload)} bytes exceeds the broker's maximum message size "
                f"of {config.max_message_size} bytes"
            )
        limit = config.max_pending_messages
        if state.in_flight >= limit:
            raise UnavailableError(
                f"append on {state.channel!r}: {limit} appends are already in flight "
                "(pulsar.max_pending_messages)"
            )
        try:
            builder = _pulsar.MessageBuilder()
            builder.content(payload)
            builder.properties(properties)  # one call into the binding, not one per property
            message = builder.build()
        except TypeError as exc:  # not bytes / str properties: this entry only
            raise InvalidInputError(f"append on {state.channel!r}: {exc}") from None
        if not state.in_flight:
            self._on_first_in_flight()
        state.in_flight += 1
        if not state.batching and self._held is None:
            # every send is an entry with a receipt of its own (the WAL writes packs):
            # nothing to learn from the next append, so nothing is held back for it
            self._send((done, message, payload, 0, properties), last=True)
            return
        held, self._held = (
            self._held,
            (done, message, payload, size_of(payload, properties), properties),
        )
        if held is None:
            asyncio.get_running_loop().call_soon(self.end_iteration)
        else:
            self._send(held, last=False)

    def end_iteration(self) -> None:
        """Send the append held back: the last of this event-loop iteration."""
        held, self._held = self._held, None
        if held is not None:
            self._send(held, last=True)

    def _send(self, entry: Prepared, *, last: bool) -> None:
        """Hand one append to the client, with a callback only if it is a segment edge.

        Appends go to the client as they come, so the producer's batching delay runs
        while later appenders still do their own work, but each is held back until the
        next one arrives or the loop iteration ends: only then is it known whether it
        is the last of its segment (:mod:`.segments`), which needs a callback.
        """
        done, message, payload, size, properties = entry
        producer = self._state.producer
        segment = self._segment
        if producer is None:  # closed with this append accepted: close sends it first
            self._state.in_flight -= 1
            closed: StreamwalError = (
                ClosedError(f"channel {self._state.channel!r} is closed")
                if self._state.closed
                # its writer was given up on (.fencewatch): this one was never sent
                else UnavailableError(
                    f"channel {self._state.channel!r}: its writer was given up on before "
                    "this append was sent"
                )
            )
            done(None, closed)
            if segment is not None:  # its last edge will never be sent
                segment.broken = True
                segment.dones.append(None)
                segment.payloads.append(payload)
                segment.properties.append(properties)
                self._segment = None
                if segment.record(True, closed):
                    self._resolve(segment)
            return
        # The producer of pulsar.asyncio exposes the C extension's producer; its
        # send_async enqueues synchronously, which is what orders the log.
        native = producer._producer
        if segment is None:
            if last or not self._state.batching:
                self._send_one(native, Single(done, payload, properties), message)
                return
            segment = self._segment = Segment([done], [payload], [properties])
            self._segment_bytes = size
            edge: Edge | None = Edge(segment, is_last=False)
        else:
            segment.dones.append(done)
            segment.payloads.append(payload)
            segment.properties.append(properties)
            self._segment_bytes += size
            if (
                last
                or len(segment.dones) >= SEGMENT_MESSAGES
                or self._segment_bytes >= SEGMENT_BYTES
            ):
                edge = Edge(segment, is_last=True)
                self._segment = None
            else:
                edge = None
        try:
            native.send_async(
                message, None if edge is None else functools.partial(self._receipts.put, edge)
            )
        except Exception as exc:  # the client refused it synchronously
            error = translate(exc, channel=self._state.channel, what="append")
            if edge is not None:
                self._on_refused_edge(edge, error)
            else:
                segment.broken = True
                segment.dones[-1] = None
                self._state.in_flight -= 1
                done(None, error)

    def _send_one(self, native: Any, single: Single, message: Any) -> None:
        try:
            native.send_async(message, functools.partial(self._receipts.put, single))
        except Exception as exc:  # the client refused it synchronously
            self._state.in_flight -= 1
            single.done(None, translate(exc, channel=self._state.channel, what="append"))

    def _on_receipt(self, token: Single | Edge, result: Any, message_id: Any) -> None:
        self._state.receipts += 1
        if self._readback.deferring:  # a read-back decides what the log holds first
            self._readback.defer(functools.partial(self._on_receipt, token, result, message_id))
            return
        if type(token) is Edge:
            if token.segment.record(token.is_last, (result, message_id)):
                self._resolve(token.segment)
            return
        single: Single = token  # type: ignore[assignment]
        if (
            result == _pulsar.Result.Ok
            and message_id.ledger_id() < 0
            and self._readback.place_unpositioned(
                [single.done], [single.payload], [single.properties], None, None
            )
        ):
            return
        self._state.in_flight -= 1
        self._state.complete(single.done, result, message_id)

    def _on_refused_edge(self, edge: Edge, error: StreamwalError) -> None:
        """An edge ``send_async`` refused: its outcome, taken in turn like a receipt."""
        if self._readback.deferring:
            self._readback.defer(functools.partial(self._on_refused_edge, edge, error))
            return
        if edge.segment.record(edge.is_last, error):
            self._resolve(edge.segment)

    def _resolve(self, segment: Segment) -> None:
        """Answer every entry of a segment once both its edges reported (.segments)."""
        dones, first, last = segment.dones, segment.first, segment.last
        n = len(dones)
        if not segment.broken and type(first) is tuple and type(last) is tuple:
            (first_result, first_id), (last_result, last_id) = first, last
            ok = _pulsar.Result.Ok
            if first_result == ok and last_result == ok:
                landed = positions(first_id, last_id, n)
                if landed is not None:
                    error = self._state.check_landed(landed[0])
                    if error is not None:
                        self._state.fail_all(dones, error)
                        return
                    self._state.in_flight -= n
                    self._state.last_landed = landed[-1]
                    for done, message_id in zip(dones, landed, strict=True):
                        done(message_id, None)  # type: ignore[misc]
                    return
                if first_id.ledger_id() < 0 or last_id.ledger_id() < 0:
                    if self._readback.place_unpositioned(
                        segment.dones,
                        segment.payloads,
                        segment.properties,
                        None if first_id.ledger_id() < 0 else first_id,
                        None if last_id.ledger_id() < 0 else last_id,
                    ):
                        return
                elif self._readback.read_back(segment, first_id, last_id):
                    return
            elif first_result == last_result:  # the batch failed as one
                self._state.fail_all(dones, self._state.failure(first_result))
                return
        log.warning(
            "channel %s: a segment of %d appends did not land in one or two batches (first: "
            "%s, last: %s); its middle entries are answered with an unknown position",
            self._state.channel,
            n,
            first,
            last,
        )
        record_segment(self._state.channel, UNPLACED)
        unknown = UnknownPositionError(
            f"append on {self._state.channel!r}: its segment was cut more than once or partly "
            "refused by the client; whether it landed is unknown"
        )
        for i, done in enumerate(dones):
            if done is None:
                continue
            self._state.in_flight -= 1
            edge = first if i == 0 else last if i == n - 1 else None
            if i == n - 1 and isinstance(edge, tuple):
                self._state.last_landed = None  # the entries in between are unknown
            if isinstance(edge, tuple):
                self._state.complete(done, *edge)
            elif isinstance(edge, BaseException):
                done(None, edge)
            else:
                done(None, unknown)
