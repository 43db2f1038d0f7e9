"""The ordered write path: allocate a time tick and hand the message to the backend.

Both happen in one critical section, so the order in which time ticks are allocated
is the order in which entries reach the backend, which persists them in that order:
time ticks are strictly increasing in log order. The critical section covers only
``allocate()`` and the synchronous enqueue, not the wait for the backend's answer, so
appends are pipelined (many in flight, one hold each).

The critical section is guarded by :class:`_Gate`, not ``asyncio.Lock``: ``allocate()``
suspends only when the allocator fetches a new batch, but once that happened under
load, ``asyncio.Lock`` (fair: a free lock with waiters is handed to the first waiter)
kept every later append queueing and suspending once, one hand-over per event-loop
iteration, for as long as appends kept arriving. The gate lets a caller that finds it
free in without suspending, keeps arrival order among those that wait, and lets every
waiter through in one iteration after a release. When the gate is free and the
allocator has a cached time tick
(:class:`~streamwal.timestamps.CachedTimestampAllocator`), an append does the whole
section without entering it: nothing in it suspends then.

**Packs** (``WALConfig.pack_appends``, log format v2, a backend that writes one entry
per submit): the messages stamped in one event-loop iteration (a batch, a node's
window, concurrent single appends) go to the backend as one entry, a pack, with one
slot in the sequencer and one answer from the backend. The open pack is handed over
at the end of the iteration, when the next message would take it past the pack
budget, or before an in-memory time tick (which must follow every message stamped
before it, and precede every one after). A message that alone is over the budget goes
in an entry of its own (the chunking layer below splits it as before). Handing the
pack over later than the stamp changes nothing in the order: packs are handed over in
the order they were opened, and no message joins a pack once a later one exists.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from streamwal.errors import StreamwalError, TimestampRegressionError
from streamwal.timestamps import CachedTimestampAllocator
from streamwal.wal.chunking import MIN_ENTRY_BYTES
from streamwal.wal.interceptors.base import InterceptorParams
from streamwal.wal.interceptors.timetick.sequencer import AckSequencer, Slot, SlotState
from streamwal.wal.message import MessageType, MutableMessage
from streamwal.wal.message.codec import LOG_FORMAT_V2, encode_stamped
from streamwal.wal.message.frame import MESSAGE_HEADER, V2_PROPERTIES, encode_pack
from streamwal.wal.message_id import MessageId

__all__ = ["OrderedWriter", "Placed", "Stamped", "pack_budget"]

#: a message as stamped: its time tick, the future of its pack's ids, its index in them
Stamped = tuple[int, "asyncio.Future[list[MessageId]]", int]
#: messages of a batch placed back to back in one pack: their time ticks, the future of
#: the pack's ids, the first one's index in them
Placed = tuple[list[int], "asyncio.Future[list[MessageId]]", int]
_MESSAGE_OVERHEAD = MESSAGE_HEADER.size
#: a batch allocates its time ticks as one range below this many (the TSO's logical bits)
_MAX_RANGE = 1 << 17
_PROPERTY_OVERHEAD = 8


def pack_budget(params: InterceptorParams) -> int:
    """The bytes one pack may take (0: no packs): what the backend said
    (``ChannelInfo.pack_bytes``), at most its entry budget and
    :data:`~streamwal.wal.chunking.MIN_ENTRY_BYTES` (a larger pack saves nothing more,
    and that much always fits one entry without asking the backend its live limit)."""
    budget = params.channel.pack_bytes
    if budget <= 0 or params.channel.log_format != LOG_FORMAT_V2:
        return 0
    budget = min(budget, MIN_ENTRY_BYTES)
    limit = getattr(params.backend, "max_entry_bytes", None)
    if isinstance(limit, int) and not isinstance(limit, bool):
        budget = min(budget, limit)
    return budget


def _size(msg: MutableMessage) -> int:
    """About what ``msg`` takes in a pack (characters for bytes: an estimate; the
    chunking layer below splits an entry the estimate let grow too large)."""
    kind = msg.type
    size = _MESSAGE_OVERHEAD + len(msg.payload) + len(msg.vchannel)
    size += len(kind) if type(kind) is str else 16
    properties = msg.properties
    if properties:
        for key, value in properties.items():
            size += _PROPERTY_OVERHEAD + len(key) + len(value)
    return size


_TIME_TICK = MutableMessage(MessageType.TIME_TICK)


class _Waiter:
    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future


class _Gate:
    """Mutual exclusion on one event loop, first come first served, without suspending
    when free.

    A caller that finds the gate free and nobody queued enters at once. Others queue in
    arrival order and enter in that order, so appends started one after the other land
    in that order even when one of them waits for an allocator fetch (a node's
    ``ProduceStream`` relies on it). A release wakes every waiter, not only the first:
    they resume in queue order in the next event-loop iteration and, since a holder
    with a cached time tick never suspends, all pass in that one iteration.
    ``asyncio.Lock`` hands itself to one waiter per iteration, and under load every
    later append queued behind that hand-over for as long as appends kept arriving.
    """

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[_Waiter] = deque()

    @property
    def free(self) -> bool:
        """Enterable without waiting: nobody holds it and nobody is queued."""
        return not self._held and not self._waiters

    async def __aenter__(self) -> None:
        if not self._held and not self._waiters:
            self._held = True
            return
        loop = asyncio.get_running_loop()
        me = _Waiter(loop.create_future())
        self._waiters.append(me)
        try:
            while self._held or self._waiters[0] is not me:
                if me.future.done():  # woken, but not this one's turn: wait again
                    me.future = loop.create_future()
                await me.future
        except BaseException:  # cancelled while queued: the ones behind move up
            self._waiters.remove(me)
            if not self._held:
                self._wake_all()
            raise
        self._waiters.popleft()
        self._held = True

    async def __aexit__(self, *exc: object) -> None:
        self._held = False
        self._wake_all()

    def _wake_all(self) -> None:
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_result(None)


class OrderedWriter:
    """Shared by appends and the periodic time tick of one channel.

    ``dirty`` is true when a non-system message was enqueued after the last persisted
    time tick was. ``check`` is called after the allocation, inside the critical
    section; it raises to stop a closing or fenced WAL from enqueueing anything more.
    """

    def __init__(
        self, params: InterceptorParams, sequencer: AckSequencer, check: Callable[[], None]
    ) -> None:
        self._backend = params.backend
        self._allocator = params.allocator
        self._node_id = params.channel.node_id
        self._term = params.channel.term
        self._log_format = params.channel.log_format
        self._sequencer = sequencer
        self._check = check
        self._lock = _Gate()
        allocator = params.allocator
        self._allocate_cached: Callable[[], int | None] | None = (
            allocator.allocate_cached if isinstance(allocator, CachedTimestampAllocator) else None
        )
        alloc = getattr(allocator, "alloc", None)
        self._alloc_range: Callable[[int], Awaitable[tuple[int, int]]] | None = (
            alloc if callable(alloc) else None
        )
        self._last_time_tick = params.first_message.time_tick
        self._budget = pack_budget(params)
        #: the pack still taking messages (its slot reserved, not handed over), its size
        self._open: Slot | None = None
        self._open_size = 0
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        self.dirty = False
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    async def write(self, msg: MutableMessage) -> Stamped:
        """Stamp and enqueue ``msg``; the future resolves (to the ids of its pack's
        messages, ``msg``'s at the index) once it is persisted and published.

        Cancelling the caller while it waits for the lock or the allocation enqueues
        nothing; once this returns, the entry is the backend's (or, in an open pack,
        will be at the end of this event-loop iteration whatever the caller does).
        """
        stamped = self.write_now(msg)
        if stamped is not None:
            return stamped
        async with self._lock:
            return self._stamp(await self._allocate(), msg)

    def write_now(self, msg: MutableMessage) -> Stamped | None:
        """:meth:`write` if it can be done without suspending, else ``None`` (nothing done).

        The fast lane, same critical section: with the gate free (nobody holding it,
        nobody queued ahead) and a time tick in the allocator's cache, nothing suspends,
        so holding the gate would change nothing; a plain call also saves the append
        path a coroutine.
        """
        if not self._lock.free or self._allocate_cached is None:
            return None
        cached = self._allocate_cached()
        if cached is None:
            return None
        return self._stamp(self._accept(cached), msg)

    async def write_many(
        self, msgs: Sequence[MutableMessage]
    ) -> tuple[list[Placed], StreamwalError | None]:
        """Stamp and enqueue ``msgs`` in order, back to back: one critical section for
        the batch, so nothing else enters the log between them and their time ticks
        increase in batch order. With packs, they fill as few entries as the pack
        budget allows, and the messages of one pack share one future.

        Returns what was enqueued (a prefix of ``msgs``), grouped by pack, and, when
        stamping stopped early (fenced, closing, the allocator failed), the error for
        the rest, none of which reached the backend. Cancelling the caller while it
        waits for an allocation leaves the prefix already enqueued to the backend.
        """
        placed: list[Placed] = []
        cached = self._allocate_cached
        enqueue = self._enqueue
        pack: Slot | None = None
        ticks: list[int] = []
        async with self._lock:
            try:
                first = await self._allocate_range(len(msgs))
                if first is not None and self._budget:
                    self._place_range(first, msgs, placed)
                    self.dirty = self.dirty or bool(placed)
                    return placed, None
                for position, msg in enumerate(msgs):
                    if first is not None:
                        time_tick = first + position
                    else:
                        one = cached() if cached is not None else None
                        time_tick = await self._allocate() if one is None else self._accept(one)
                    slot, index = enqueue(time_tick, msg)
                    if slot is pack:
                        ticks.append(time_tick)
                    else:  # one future per pack of the batch
                        pack, ticks = slot, [time_tick]
                        placed.append((ticks, slot.waiter(), index))
                        self.dirty = True
            except StreamwalError as exc:
                return placed, exc
        return placed, None

    def _place_range(
        self, first: int, msgs: Sequence[MutableMessage], placed: list[Placed]
    ) -> None:
        """Enqueue ``msgs`` at the time ticks ``first, first + 1, ...``, a pack at a
        time: the first message of each goes through :meth:`_enqueue` (which opens a
        pack, joins the open one, or sends an oversized message alone), and as many of
        the next as fit the budget join it in one step. Appends to ``placed`` as it
        goes, so what was enqueued is known if the backend refuses an entry."""
        budget = self._budget
        count = len(msgs)
        position = 0
        while position < count:
            slot, index = self._enqueue(first + position, msgs[position])
            end = position + 1
            if slot is self._open:  # a pack still taking messages: fill it
                size = self._open_size
                while end < count:
                    grown = size + _size(msgs[end])
                    if grown > budget:
                        break
                    size = grown
                    end += 1
                if end > position + 1:
                    slot.messages.extend(msgs[position + 1 : end])
                    slot.time_ticks.extend(range(first + position + 1, first + end))
                    self._open_size = size
            placed.append((list(range(first + position, first + end)), slot.waiter(), index))
            position = end

    def _stamp(self, time_tick: int, msg: MutableMessage) -> Stamped:
        slot, index = self._enqueue(time_tick, msg)
        if msg.type is not MessageType.TIME_TICK:
            self.dirty = True
        return time_tick, slot.waiter(), index

    async def tick(self) -> asyncio.Future[list[MessageId]] | None:
        """A time tick: persisted if the channel is dirty (its future), else in memory."""
        async with self._lock:
            time_tick = await self._allocate()
            if not self.dirty:
                self.flush()  # the in-memory tick follows every message stamped before it
                self._sequencer.reserve_time_tick(time_tick)
                return None
            slot, _ = self._enqueue(time_tick, _TIME_TICK)
            self.dirty = False
            return slot.waiter()

    async def _allocate(self) -> int:
        return self._accept(await self._allocator.allocate())

    async def _allocate_range(self, count: int) -> int | None:
        """The first of ``count`` consecutive time ticks, in one call to an allocator
        that hands out ranges (``alloc(count)``, :class:`~streamwal.tso.LocalAllocator`);
        ``None``: allocate them one by one."""
        alloc = self._alloc_range
        if alloc is None or count < 2 or count >= _MAX_RANGE:
            return None
        first, last = await alloc(count)
        self._accept(first)
        if last - first != count - 1:
            raise TimestampRegressionError(f"allocator returned {first}..{last} for {count}")
        self._last_time_tick = last
        return first

    def _accept(self, time_tick: int) -> int:
        self._check()
        if time_tick <= self._last_time_tick:
            raise TimestampRegressionError(
                f"allocator returned {time_tick}, not above {self._last_time_tick}"
            )
        self._last_time_tick = time_tick
        return time_tick

    def _enqueue(self, time_tick: int, msg: MutableMessage) -> tuple[Slot, int]:
        """Put ``msg`` in the open pack, or in a new slot: its slot and index there."""
        budget = self._budget
        size = 0
        if budget:
            size = _size(msg)
            pack = self._open
            if pack is not None:
                if self._open_size + size <= budget:
                    pack.messages.append(msg)
                    pack.time_ticks.append(time_tick)
                    self._open_size += size
                    return pack, len(pack.messages) - 1
                self.flush()
        slot = self._sequencer.reserve(time_tick, msg)
        self._in_flight += 1
        self._drained.clear()
        if budget and size < budget:
            self._open = slot
            self._open_size = size
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._end_iteration)
            return slot, 0
        self._submit(slot, raise_refusal=True)
        return slot, 0

    def _end_iteration(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        """Hand the open pack (if any) to the backend now."""
        pack = self._open
        if pack is not None:
            self._open = None
            self._submit(pack, raise_refusal=False)

    def _submit(self, slot: Slot, *, raise_refusal: bool) -> None:
        """Encode ``slot``'s pack and hand it to the backend. A backend that raises
        (refusals go through its callback: this is a broken one) fails the slot; the
        error is also raised to a caller that handed the entry over itself."""
        messages = slot.messages
        if len(messages) == 1:
            payload, properties = encode_stamped(
                messages[0],
                slot.time_tick,
                slot.last_confirmed,
                self._node_id,
                log_format=self._log_format,
                term=self._term,
            )
        else:
            payload = encode_pack(
                zip(messages, slot.time_ticks, strict=True),
                slot.last_confirmed,
                self._node_id,
                self._term,
            )
            properties = dict(V2_PROPERTIES)
        try:
            self._backend.submit(payload, properties, functools.partial(self._on_answer, slot))
        except BaseException as exc:
            if slot.state is SlotState.PENDING:
                self._answered()
                if raise_refusal:
                    for waiter in slot.waiters:
                        waiter.cancel()  # the error is raised here, not through the future
                self._sequencer.abandon(slot, exc)
            if raise_refusal:
                raise

    def _on_answer(
        self, slot: Slot, message_id: MessageId | None, error: BaseException | None
    ) -> None:
        if slot.state is not SlotState.PENDING:
            return  # answered twice: the first answer stands
        self._answered()
        self._sequencer.resolve(slot, message_id, error)

    def _answered(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._drained.set()

    @property
    def in_flight(self) -> int:
        """Entries handed to the backend and not answered yet."""
        return self._in_flight

    async def drained(self) -> None:
        """Until every entry handed to the backend has been answered."""
        await self._drained.wait()
