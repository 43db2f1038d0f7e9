"""Scanners: read a channel from a delivery policy, switching between backend and buffer.

A scanner catches up from the backend. Once the last message it consumed has a time
tick at or above the write-ahead buffer's ``floor``, the buffer holds everything after
it, so the scanner switches to tailing the buffer (``read_after(last)``), with no broker
round trip per message. If the buffer evicts what the scanner still needs, or is sealed
(this owner was fenced), the scanner goes back to the backend right after the last
message it consumed (``StartAfter``), and switches again when it can. Because the log's
time ticks strictly increase, "after time tick T" and "after message id M" name the
same position, so nothing is lost or repeated across a switch; as a last guard a
message whose time tick is not above the last consumed one is never delivered.

Only persisted messages are yielded; in-memory time ticks advance :attr:`Scanner.watermark`.
A transaction's messages are yielded at its commit, together and in log order, never
after a rollback (:mod:`streamwal.wal.txn_assembly`); a time-tick policy and the
vchannel filter apply to a transaction as a whole, at its commit.
An entry of log format v2 may hold a pack of several messages: they are delivered in
order, each with its own id, and a read that starts at (or after) a message inside a
pack leaves out the pack's messages before (or up to) it. ``appended_only`` leaves
out the records the WAL wrote itself (time ticks, transaction markers).
Entries that do not decode are skipped, counted (:attr:`Scanner.skipped` and a metric) and
logged; an entry of a newer log format ends the read with
:class:`~streamwal.errors.UnsupportedLogFormatError` (skipping it would lose messages).
A retriable backend error reopens the backend after a backoff.

One task iterates a scanner at a time; :meth:`Scanner.close` may be called from any
task at any time, and the iterating task then gets :class:`~streamwal.errors.ClosedError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence

from opentelemetry import metrics

from streamwal.errors import (
    BufferSealedError,
    ClosedError,
    DecodeError,
    EvictedError,
    StreamwalError,
)
from streamwal.retry import Retry
from streamwal.timeouts import within
from streamwal.wal.backend import BackendScanner, BackendWAL, DeliveryPolicy
from streamwal.wal.config import Backoff
from streamwal.wal.message import ImmutableMessage, MessageIdDecoder, MessageType, decode_entry
from streamwal.wal.message.codec import from_position
from streamwal.wal.message_id import MessageId
from streamwal.wal.metrics import record_delivered, record_scanner_lag
from streamwal.wal.retention_contract import TruncationPoint
from streamwal.wal.txn_assembly import TxnAssembler
from streamwal.wal.write_ahead_buffer import BufferCursor, WriteAheadBuffer

__all__ = ["Scanner"]

_log = logging.getLogger(__name__)
_skipped = metrics.get_meter(__name__).create_counter(
    "streamwal.wal.scanner.skipped",
    unit="{message}",
    description="Backend entries a scanner skipped (undecodable or out of order)",
)

SOURCE_BACKEND = "backend"
SOURCE_BUFFER = "buffer"
# what Scanner._pass did with a message
_DELIVER, _FILTERED, _OTHER = object(), object(), object()


class Scanner:
    """An async iterator of :class:`~streamwal.wal.message.ImmutableMessage`; see the module
    docstring.

    ``vchannel``: only messages of that vchannel and those for every vchannel (``None``:
    everything). ``watermark``: every message with a time tick at or below it has been
    consumed. ``source``: ``"backend"`` or ``"buffer"``, where the scanner reads now.
    """

    def __init__(
        self,
        *,
        channel: str,
        backend: BackendWAL,
        message_id_from_bytes: MessageIdDecoder,
        policy: DeliveryPolicy,
        vchannel: str | None = None,
        buffer: WriteAheadBuffer | None = None,
        backoff: Backoff,
        on_close: Callable[[Scanner], None] | None = None,
        appended_only: bool = False,
        truncated: TruncationPoint | None = None,
    ) -> None:
        self.channel = channel
        self.policy = policy
        self.vchannel = vchannel
        self.watermark = 0
        self.skipped = 0
        self.source = SOURCE_BACKEND
        self._backend = backend
        self._decode_id = message_id_from_bytes
        self._buffer = buffer
        self._on_close = on_close
        self._min_time_tick = policy.time_tick
        # what the buffer may still hold of a truncated part (a time-tick read served
        # from it); the backend skips that itself
        self._truncated = truncated
        self._last_time_tick: int | None = None  # of the last consumed message
        self._resume = policy  # where the backend continues after what was consumed
        # the last consumed id, when newer than _resume: its policy is built only when
        # the backend is (re)opened, not once per message
        self._consumed_id: MessageId | None = None
        self._cursor: BufferCursor | None = None
        self._backend_scanner: BackendScanner | None = None
        # a failed read waits and reopens for as long as its errors are retriable; a
        # message read starts the schedule over
        self._retry = Retry(backoff, max_attempts=None, sleep=self._wait)
        self._closed = False
        self._close_event = asyncio.Event()
        self._txns = TxnAssembler(channel)
        self._ready: deque[ImmutableMessage] = deque()
        self.appended_only = appended_only
        # the rest of the pack the backend read last, in order
        self._unpacked: deque[ImmutableMessage] = deque()
        # the position a backend read was opened at, until its first entry is unpacked
        self._pack_start: DeliveryPolicy | None = None

    @property
    def dropped_transactions(self) -> int:
        """Transactions read and not delivered (rolled back, cut by an owner change)."""
        return self._txns.dropped

    async def start(self) -> None:
        """Open the first source; errors of the policy (unknown message id) raise here."""
        policy = self.policy
        if policy.kind == DeliveryPolicy.START_FROM_TIME_TICK:
            self._set_resume(DeliveryPolicy.all())
            if policy.time_tick is not None and policy.time_tick > 0:
                self._try_buffer(policy.time_tick - 1)
        elif policy.kind == DeliveryPolicy.LATEST and self._buffer is not None:
            self._try_buffer(self._buffer.last_time_tick)
        if self._cursor is None:
            await self._open_backend()

    def _try_buffer(self, after: int) -> None:
        if self._buffer is None or self._buffer.sealed or after < self._buffer.floor:
            return
        self._cursor = self._buffer.read_after(after)
        self._set_resume(self._cursor.start_policy)
        self._last_time_tick = after
        self.watermark = max(self.watermark, after)
        self.source = SOURCE_BUFFER

    def __aiter__(self) -> Scanner:
        return self

    async def __anext__(self) -> ImmutableMessage:
        while True:
            self._check_open()
            if self._ready:
                ready = self._ready.popleft()
                record_scanner_lag(self.channel, ready.time_tick)
                return ready
            unpacked = self._unpacked
            msg: ImmutableMessage | None
            if unpacked and self._cursor is None and (len(unpacked) > 1 or self._buffer is None):
                # the rest of a pack read from the backend: a plain message is consumed
                # here, without the backend read's await (the last one of a pack takes
                # the path below when a buffer may take over after it)
                msg = unpacked.popleft()
                passed = self._pass(msg)
                if passed is _DELIVER:
                    record_scanner_lag(self.channel, msg.time_tick)
                    return msg
                if passed is _FILTERED:
                    continue
            elif self._cursor is not None:
                msg = await self._next_from_buffer(self._cursor)
            else:
                msg = await self._next_from_backend()
            if msg is None:
                continue
            in_order = self._consume(msg)
            if self._cursor is None:
                await self._maybe_switch_to_buffer()
            if in_order:
                released = self._txns.feed(msg)
                if released and self._wanted(released[-1]):
                    self._release(released)

    def _pass(self, msg: ImmutableMessage) -> object:
        """Consume ``msg`` if it is a plain one (in order, outside a transaction, none
        held, nothing waiting before it), doing what :meth:`_consume`,
        ``TxnAssembler.feed`` and :meth:`_wanted` do for it, inline: :data:`_DELIVER`
        or :data:`_FILTERED` (consumed, not wanted). :data:`_OTHER`: not plain,
        untouched, for the general path. Most messages of a read are plain."""
        time_tick, last = msg.time_tick, self._last_time_tick
        if (
            msg.txn_id is not None
            or msg.type is MessageType.BEGIN_TXN
            or self.appended_only
            or last is None
            or time_tick <= last
            or self._ready
            or self._txns.held
        ):
            return _OTHER
        self._consumed_id = msg.message_id
        self._last_time_tick = time_tick
        if time_tick > self.watermark:
            self.watermark = time_tick
        min_time_tick, vchannel, truncated = self._min_time_tick, self.vchannel, self._truncated
        if (
            (min_time_tick is None or time_tick >= min_time_tick)
            and (vchannel is None or msg.applies_to(vchannel))
            and (truncated is None or not truncated.covers(msg.message_id))
        ):
            return _DELIVER
        return _FILTERED

    async def next_batch(self, limit: int) -> list[ImmutableMessage]:
        """The next message (waiting for it, as ``__anext__``) and, up to ``limit`` in
        all, those after it that the buffer already holds: one await per batch rather
        than per message, for a reader that forwards many at a time (``ConsumeBatch``).
        The messages, their order, the watermark and the errors are those of
        ``__anext__`` called as often."""
        batch = [await self.__anext__()]
        if limit > 1:
            self._take_ready(batch, limit)
        return batch

    def _take_ready(self, batch: list[ImmutableMessage], limit: int) -> None:
        """Add to ``batch``, up to ``limit`` in all, what ``__anext__`` would return
        without waiting; stop where it would wait, raise or read the backend. Entries
        are taken from the buffer (or messages from the rest of a pack the backend
        read) at most as many as there is room for: each gives at most one message (a
        commit gives its transaction, which may go past ``limit`` and waits in
        ``_ready`` for the next call, as it would for ``__anext__``)."""
        start = len(batch)
        ready, txns, unpacked = self._ready, self._txns, self._unpacked
        while not self._closed:
            while ready and len(batch) < limit:
                batch.append(ready.popleft())
            room = limit - len(batch)
            if room <= 0:
                break
            cursor = self._cursor
            msgs: list[ImmutableMessage] = []
            if cursor is not None:
                entries = cursor.take_ready(room)
                if not entries:
                    break
                for entry in entries:
                    if entry.message is None:
                        self.watermark = max(self.watermark, entry.time_tick)
                    else:
                        msgs.append(entry.message)
            elif len(unpacked) > 1 or (unpacked and self._buffer is None):
                # the rest of a pack; its last message stays for __anext__ when a
                # buffer may take over after it
                take = min(room, len(unpacked) if self._buffer is None else len(unpacked) - 1)
                msgs = [unpacked.popleft() for _ in range(take)]
            else:
                break
            for msg in msgs:
                passed = self._pass(msg)
                if passed is _DELIVER:
                    batch.append(msg)
                elif passed is _OTHER and self._consume(msg):
                    released = txns.feed(msg)
                    if released and self._wanted(released[-1]):
                        self._release(released)
        if len(batch) > start:  # one delivery: __anext__ sampled its oldest message
            record_delivered(self.channel, len(batch) - start)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"scanner of channel {self.channel!r} is closed")

    async def _next_from_buffer(self, cursor: BufferCursor) -> ImmutableMessage | None:
        try:
            entry = await cursor.next()
        except (EvictedError, BufferSealedError) as exc:
            self._check_open()
            _log.info("channel %s: scanner falls back to the backend: %s", self.channel, exc)
            cursor.close()
            self._cursor = None
            await self._open_backend()
            return None
        except ClosedError:
            self._check_open()
            raise
        if entry.message is None:
            self.watermark = max(self.watermark, entry.time_tick)
            return None
        return entry.message

    def _release(self, released: Sequence[ImmutableMessage]) -> None:
        if self.appended_only:
            self._ready.extend(m for m in released if not m.is_wal_record)
        else:
            self._ready.extend(released)

    async def _next_from_backend(self) -> ImmutableMessage | None:
        if self._unpacked:
            return self._unpacked.popleft()
        if self._backend_scanner is None:
            await self._open_backend()
        scanner = self._backend_scanner
        if scanner is None:  # closed meanwhile
            self._check_open()
            return None
        try:
            raw = await scanner.__anext__()
        except StreamwalError as exc:
            self._check_open()
            delay = self._retry_delay(exc, "backend read", "reopening")
            await self._close_backend_scanner()
            await self._retry.wait(delay)
            return None
        self._retry.reset()
        start, self._pack_start = self._pack_start, None
        try:
            msgs = decode_entry(raw, self._decode_id)
        except DecodeError as exc:
            self._set_resume(DeliveryPolicy.start_after(raw.message_id))
            self._skip("undecodable", f"skipped undecodable message: {exc}")
            return None
        if start is not None and len(msgs) > 1:
            msgs = from_position(msgs, start)
            if not msgs:
                return None
        if len(msgs) > 1:
            self._unpacked.extend(msgs[1:])
        return msgs[0]

    def _consume(self, msg: ImmutableMessage) -> bool:
        """Record ``msg`` as consumed; whether it is in order (else skipped)."""
        self._consumed_id = msg.message_id
        if self._last_time_tick is not None and msg.time_tick <= self._last_time_tick:
            self._skip(
                "out_of_order",
                f"skipped {msg.message_id}: time tick {msg.time_tick} is not above "
                f"{self._last_time_tick}",
            )
            return False
        self._last_time_tick = msg.time_tick
        self.watermark = max(self.watermark, msg.time_tick)
        return True

    def _wanted(self, msg: ImmutableMessage) -> bool:
        """Whether the policy and filter want ``msg`` (a transaction: its commit)."""
        if self._min_time_tick is not None and msg.time_tick < self._min_time_tick:
            return False
        if self._truncated is not None and self._truncated.covers(msg.message_id):
            return False
        return self.vchannel is None or msg.applies_to(self.vchannel)

    def _set_resume(self, policy: DeliveryPolicy) -> None:
        self._resume = policy
        self._consumed_id = None

    def _resume_policy(self) -> DeliveryPolicy:
        """Where the backend continues: after the last consumed message, if any since."""
        if self._consumed_id is not None:
            self._set_resume(DeliveryPolicy.start_after(self._consumed_id))
        return self._resume

    def _skip(self, reason: str, text: str) -> None:
        self.skipped += 1
        _skipped.add(1, {"channel": self.channel, "reason": reason})
        _log.warning("channel %s: %s", self.channel, text)

    async def _maybe_switch_to_buffer(self) -> None:
        buffer, last = self._buffer, self._last_time_tick
        if buffer is None or buffer.sealed or last is None or last < buffer.floor:
            return
        if self._unpacked:  # the rest of a pack first: the buffer may not hold it
            return
        self._cursor = buffer.read_after(last)
        self.source = SOURCE_BUFFER
        await self._close_backend_scanner()

    async def _open_backend(self) -> None:
        while True:
            self._check_open()
            try:
                scanner = await self._backend.read(self._resume_policy())
            except StreamwalError as exc:
                delay = self._retry_delay(
                    exc, f"opening a backend read at {self._resume}", "retrying"
                )
                await self._retry.wait(delay)
                continue
            if self._closed:
                await _close_quietly(scanner)
                self._check_open()
            self._backend_scanner = scanner
            self._unpacked.clear()
            self._pack_start = self._resume
            self.source = SOURCE_BACKEND
            return

    def _retry_delay(self, exc: StreamwalError, failed: str, then: str) -> float:
        """The wait before the backend is tried again after ``exc`` (logged as ``failed``,
        then ``then``): a read and an open that fail are one schedule, which re-raises
        ``exc`` when it is not worth another try."""
        delay = self._retry.next(exc)
        if delay is None:
            raise exc
        _log.warning(
            "channel %s: %s failed (%r); %s in %.0f ms",
            self.channel,
            failed,
            exc,
            then,
            delay * 1000,
        )
        return delay

    async def _close_backend_scanner(self) -> None:
        scanner, self._backend_scanner = self._backend_scanner, None
        if scanner is not None:
            await _close_quietly(scanner)

    async def _wait(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await within(self._close_event.wait(), delay)
        self._check_open()

    async def close(self) -> None:
        """Stop the scanner (idempotent); a task iterating it gets ``ClosedError``."""
        if self._closed:
            return
        self._closed = True
        self._close_event.set()
        if self._cursor is not None:
            self._cursor.close()
        await self._close_backend_scanner()
        if self._on_close is not None:
            self._on_close(self)


async def _close_quietly(scanner: BackendScanner) -> None:
    try:
        await scanner.close()
    except Exception:
        _log.exception("closing a backend scanner failed")
