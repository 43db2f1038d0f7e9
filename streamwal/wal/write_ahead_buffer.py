"""The write-ahead buffer: the tail of one channel's log, in memory, for tailing readers.

Entries are persisted messages and in-memory time ticks, in log order, with strictly
increasing time ticks. The buffer is bounded by bytes and by age, and always keeps its
last entry. ``floor`` is what it promises: it holds every persisted message whose time
tick is above ``floor`` (until it is sealed).

Single event loop, no locks: mutations are synchronous; readers wait on a future that
the next change resolves. Once sealed (the owner was fenced, or the WAL is closing) the
buffer takes nothing more; readers drain what it holds and then get
:class:`~streamwal.errors.BufferSealedError`, their cue to read the backend.
"""

from __future__ import annotations

import asyncio
import bisect
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from opentelemetry import metrics

from streamwal.errors import (
    BufferSealedError,
    ChannelFencedError,
    ClosedError,
    EvictedError,
    InvalidInputError,
)
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.message import ImmutableMessage
from streamwal.wal.message_id import MessageId
from streamwal.wal.metrics import record_evictions

__all__ = ["BufferCursor", "BufferEntry", "WriteAheadBuffer"]

_TICK_SIZE = 32  # bytes accounted for an in-memory time tick

_meter = metrics.get_meter(__name__)
_live_buffers: weakref.WeakSet[WriteAheadBuffer] = weakref.WeakSet()


def _observe_sizes(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
    for buffer in list(_live_buffers):
        yield metrics.Observation(buffer.size_bytes, {"channel": buffer.channel})


_meter.create_observable_gauge(
    "streamwal.wal.buffer.size",
    callbacks=[_observe_sizes],
    unit="By",
    description="Bytes held by write-ahead buffers",
)


class BufferEntry(NamedTuple):
    """A persisted message, or (``message is None``) an in-memory time tick."""

    time_tick: int
    message: ImmutableMessage | None
    size: int
    added_at: float


class WriteAheadBuffer:
    """The in-memory tail of one channel, starting with the owner's first time tick.

    Fed as a :class:`~streamwal.wal.listener.LogListener` of the owner's log (after
    MVCC, so the readers it wakes find MVCC up to date).
    """

    def __init__(
        self,
        first: ImmutableMessage,
        *,
        capacity_bytes: int,
        keepalive: float,
        channel: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel
        self._capacity = capacity_bytes
        self._keepalive = keepalive
        self._clock = clock
        self._entries: deque[BufferEntry] = deque()
        self._base_seq = 0  # sequence number of _entries[0]
        self._size = 0
        self._floor = first.time_tick - 1
        self._first_id = first.message_id
        self._last_evicted_id: MessageId | None = None
        self._sealed = False
        self._waiters: list[asyncio.Future[None]] = []
        self._push(BufferEntry(first.time_tick, first, first.estimated_size, clock()))
        _live_buffers.add(self)

    @property
    def floor(self) -> int:
        """Every persisted message with a time tick above this is held (or was, if sealed)."""
        return self._floor

    @property
    def last_time_tick(self) -> int:
        return self._entries[-1].time_tick

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def sealed(self) -> bool:
        return self._sealed

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, msg: ImmutableMessage) -> None:
        """Add a persisted message (log order; ignored once sealed)."""
        self._add(BufferEntry(msg.time_tick, msg, msg.estimated_size, self._clock()))

    def append_many(self, msgs: Sequence[ImmutableMessage]) -> None:
        """:meth:`append` for the messages of one pack, in log order: one clock read,
        one eviction round and one wake-up of the readers for all of them. A message
        whose time tick is not above the last is left out and raises, after the
        others are in (as appending them one by one would have)."""
        if self._sealed:
            return
        now = self._clock()
        entries = self._entries
        last = entries[-1].time_tick
        size = self._size
        refused: InvalidInputError | None = None
        for msg in msgs:
            time_tick = msg.time_tick
            if time_tick <= last:
                refused = refused or InvalidInputError(
                    f"buffer of {self.channel!r}: time tick {time_tick} is not above {last}"
                )
                continue
            entry_size = msg.estimated_size
            entries.append(BufferEntry(time_tick, msg, entry_size, now))
            size += entry_size
            last = time_tick
        self._size = size
        self.evict()
        self._notify()
        if refused is not None:
            raise refused

    def append_time_tick(self, time_tick: int) -> None:
        """Add an in-memory time tick: no persisted message at or below it is still to come."""
        self._add(BufferEntry(time_tick, None, _TICK_SIZE, self._clock()))

    def _add(self, entry: BufferEntry) -> None:
        if self._sealed:
            return
        if entry.time_tick <= self.last_time_tick:
            raise InvalidInputError(
                f"buffer of {self.channel!r}: time tick {entry.time_tick} is not above "
                f"{self.last_time_tick}"
            )
        self._push(entry)
        self.evict()
        self._notify()

    def _push(self, entry: BufferEntry) -> None:
        self._entries.append(entry)
        self._size += entry.size

    def evict(self) -> int:
        """Drop the oldest entries beyond capacity or keepalive (never the last); the count."""
        now = self._clock()
        evicted = 0
        while len(self._entries) > 1:
            head = self._entries[0]
            if self._size <= self._capacity and now - head.added_at <= self._keepalive:
                break
            self._entries.popleft()
            self._base_seq += 1
            self._size -= head.size
            self._floor = max(self._floor, head.time_tick)
            if head.message is not None:
                self._last_evicted_id = head.message.message_id
            evicted += 1
        if evicted:
            record_evictions(self.channel, evicted)
        return evicted

    # the listener hooks are the methods themselves: one call less per append
    on_persisted = append
    on_persisted_many = append_many
    on_time_tick = append_time_tick

    def on_fenced(self, error: ChannelFencedError) -> None:
        """Seal: the new owner's messages are in the backend only, so the readers, once
        they drain this buffer, move on to it."""
        self.seal()

    def mark_gap(self, time_tick: int) -> None:
        """The log may hold a message at ``time_tick`` that this buffer never got (an
        append whose outcome is unknown: it may have landed). The buffer stops promising
        anything at or below it, so a reader there goes to the backend, which has it if
        it landed, rather than miss it here and read what follows."""
        if self._sealed or time_tick <= self._floor:
            return
        self._floor = time_tick
        self._notify()

    def seal(self) -> None:
        """Take no more entries; readers drain and then get ``BufferSealedError``."""
        if not self._sealed:
            self._sealed = True
            self._notify()

    def read_after(self, time_tick: int) -> BufferCursor:
        """A cursor over the entries with a time tick above ``time_tick``, waiting for more.

        Raises :class:`~streamwal.errors.EvictedError` if ``time_tick < floor`` (the buffer no
        longer holds everything after it) and :class:`~streamwal.errors.BufferSealedError` if
        the buffer is sealed.
        """
        if self._sealed:
            raise BufferSealedError(f"write-ahead buffer of {self.channel!r} is sealed")
        if time_tick < self._floor:
            raise EvictedError(
                f"write-ahead buffer of {self.channel!r} starts above time tick "
                f"{self._floor}, not at {time_tick}"
            )
        index = bisect.bisect_right(self._entries, time_tick, key=lambda e: e.time_tick)
        return BufferCursor(self, self._base_seq + index, time_tick, self._resume_before(index))

    def read_latest(self) -> BufferCursor:
        """A cursor over entries added from now on."""
        return self.read_after(self.last_time_tick)

    def _resume_before(self, index: int) -> DeliveryPolicy:
        """Where the backend continues the log just before entry ``index``."""
        for i in range(index - 1, -1, -1):
            msg = self._entries[i].message
            if msg is not None:
                return DeliveryPolicy.start_after(msg.message_id)
        if self._last_evicted_id is not None:
            return DeliveryPolicy.start_after(self._last_evicted_id)
        return DeliveryPolicy.start_from(self._first_id)

    def _notify(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _changed(self) -> None:
        """Wait for the next change (an entry, a seal, a cursor closing)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter


class BufferCursor:
    """One reader's position in a :class:`WriteAheadBuffer`; one task reads it at a time.

    ``start_policy`` says where the backend continues the log at the cursor's start, for
    a reader that has to fall back before it consumed anything.
    """

    def __init__(
        self, buffer: WriteAheadBuffer, next_seq: int, after: int, start_policy: DeliveryPolicy
    ) -> None:
        self._buffer = buffer
        self._next_seq = next_seq
        self._after = after
        self.start_policy = start_policy
        self._closed = False

    async def next(self) -> BufferEntry:
        """The next entry; waits for one.

        Raises :class:`~streamwal.errors.EvictedError` if entries this cursor still needed
        were evicted, :class:`~streamwal.errors.BufferSealedError` once a sealed buffer is
        drained, :class:`~streamwal.errors.ClosedError` once the cursor is closed.
        """
        buffer = self._buffer
        while True:
            if self._closed:
                raise ClosedError("buffer cursor closed")
            if buffer._floor > self._after:  # evicted, or a gap (mark_gap) after it
                raise EvictedError(
                    f"write-ahead buffer of {buffer.channel!r} no longer holds everything "
                    f"after time tick {self._after} (it starts above {buffer._floor})"
                )
            entry = self._take()
            if entry is not None:
                return entry
            if buffer._sealed:
                raise BufferSealedError(f"write-ahead buffer of {buffer.channel!r} is sealed")
            await buffer._changed()

    def take_ready(self, limit: int) -> list[BufferEntry]:
        """The entries :meth:`next` would return now, without waiting, at most
        ``limit``; none when it would wait or raise (a reader then calls :meth:`next`,
        which says why). Lets a reader take what the buffer holds without an await or
        a call per entry."""
        taken: list[BufferEntry] = []
        buffer = self._buffer
        if self._closed or buffer._floor > self._after:
            return taken
        entries, after = buffer._entries, self._after
        index = max(self._next_seq, buffer._base_seq) - buffer._base_seq
        while index < len(entries) and len(taken) < limit:
            entry = entries[index]
            index += 1
            if entry.time_tick > after:
                after = entry.time_tick
                taken.append(entry)
        self._next_seq, self._after = buffer._base_seq + index, after
        return taken

    def _take(self) -> BufferEntry | None:
        buffer = self._buffer
        if self._next_seq < buffer._base_seq:
            self._next_seq = buffer._base_seq
        entries = buffer._entries
        while (index := self._next_seq - buffer._base_seq) < len(entries):
            entry = entries[index]
            self._next_seq += 1
            if entry.time_tick > self._after:
                self._after = entry.time_tick
                return entry
        return None

    def close(self) -> None:
        """Stop the cursor; a task waiting in :meth:`next` gets ``ClosedError``."""
        if not self._closed:
            self._closed = True
            self._buffer._notify()
