"""What an interceptor is, and what it is built from.

An interceptor takes part in the append path (:meth:`Interceptor.do_append`, wrapping
the ones after it in the chain). It is also a
:class:`~streamwal.wal.listener.LogListener`: told, synchronously and in log order, of
every persisted message, every in-memory time tick, and the channel being fenced,
after MVCC and the write-ahead buffer. Both orders are declared once, in
:mod:`streamwal.wal.interceptors.chain`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from streamwal.errors import ChannelFencedError, StreamwalError
from streamwal.timestamps import TimestampAllocator
from streamwal.wal.backend import BackendWAL
from streamwal.wal.config import WALConfig
from streamwal.wal.fence import Fence
from streamwal.wal.interceptors.holds import ConfirmHolds
from streamwal.wal.listener import LogListener
from streamwal.wal.message import ImmutableMessage, MessageIdDecoder, MutableMessage
from streamwal.wal.message_id import MessageId
from streamwal.wal.mvcc import MVCCManager
from streamwal.wal.write_ahead_buffer import WriteAheadBuffer

__all__ = [
    "AppendFunc",
    "AppendResult",
    "BatchAppender",
    "ChannelInfo",
    "Interceptor",
    "InterceptorBase",
    "InterceptorParams",
    "Sink",
    "WALHandle",
]


class AppendResult(NamedTuple):
    """Where a message was persisted and the time tick it was given."""

    message_id: MessageId
    time_tick: int


AppendFunc = Callable[[MutableMessage], Awaitable[AppendResult]]


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """The channel a WAL serves, the node that owns it, the term it owns it under
    (Milvus's ``PChannelInfo.Term``: 0 when the opener gave none), the log format
    it writes (1 or 2, ``docs/wire-format.md``), and the most bytes a pack of several
    messages in one entry may take (0: one message per entry; v2 only,
    ``WALConfig.pack_appends`` on a backend that writes one entry per submit)."""

    name: str
    node_id: int
    term: int = 0
    log_format: int = 2
    pack_bytes: int = 0


class WALHandle(Protocol):
    """What an interceptor may use of the WAL it is part of.

    The WAL builds the interceptors, so they see it through this protocol rather than
    import :mod:`streamwal.wal.wal`: the interceptors sit below the WAL, and an import
    the other way, even for types, would close a circle.
    """

    @property
    def message_id_decoder(self) -> MessageIdDecoder: ...

    async def write_system(self, msg: MutableMessage) -> AppendResult: ...


@dataclass(frozen=True, slots=True)
class InterceptorParams:
    """Everything an interceptor may be built from (Milvus's ``InterceptorBuildParam``).

    ``wal`` resolves to the WAL once it is ready, for interceptors that need it later.
    ``holds``: where open transactions hold LastConfirmed back (the time-tick
    interceptor stamps no message past them). ``clock``: the owner's monotonic clock in
    seconds, which transaction keepalives are measured on (TSO time jumps with the
    allocator's cached blocks); injectable so tests need not sleep.
    """

    channel: ChannelInfo
    first_message: ImmutableMessage
    buffer: WriteAheadBuffer
    mvcc: MVCCManager
    backend: BackendWAL
    allocator: TimestampAllocator
    config: WALConfig
    wal: asyncio.Future[WALHandle]
    holds: ConfirmHolds = field(default_factory=ConfirmHolds)
    clock: Callable[[], float] = time.monotonic


class Sink(Protocol):
    """Where the persisting interceptor reports, in log order (the chain).

    ``fence`` is the WAL's one record of the fence: the persisting interceptor sets it
    (``sink.fence.set(error)``), and whoever must know whether appends may go on asks it
    rather than keep a flag of its own; the log listeners are told through
    :meth:`~streamwal.wal.listener.LogListener.on_fenced`. ``publish`` and
    ``publish_time_tick`` tell every log listener, in the declared order;
    ``publish_many`` tells them of the messages of one pack, in log order, at once.
    """

    @property
    def fence(self) -> Fence: ...

    def publish(self, msg: ImmutableMessage) -> None: ...

    def publish_many(self, msgs: Sequence[ImmutableMessage]) -> None: ...

    def publish_time_tick(self, time_tick: int) -> None: ...


class Interceptor(LogListener, Protocol):
    """One stage of the WAL, and a listener of its log. Hooks are synchronous and must
    not raise."""

    async def start(self) -> None: ...

    async def do_append(self, msg: MutableMessage, append: AppendFunc) -> AppendResult:
        """Append ``msg``; ``append`` is the rest of the chain."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class BatchAppender(Protocol):
    """The optional ability of the persisting interceptor to append a batch back to
    back (``do_append_many``): one outcome per message, in batch order."""

    async def do_append_many(
        self, msgs: Sequence[MutableMessage]
    ) -> list[AppendResult | StreamwalError]: ...


class InterceptorBase:
    """Does nothing at every hook; interceptors override what they need (the chain
    tells an interceptor only of what it overrides)."""

    def __init__(self, params: InterceptorParams, sink: Sink) -> None:
        self.params = params
        self.sink = sink

    async def start(self) -> None:
        return None

    async def do_append(self, msg: MutableMessage, append: AppendFunc) -> AppendResult:
        return await append(msg)

    def on_persisted(self, msg: ImmutableMessage) -> None:
        return None

    def on_persisted_many(self, msgs: Sequence[ImmutableMessage]) -> None:
        """The messages of one pack (:mod:`streamwal.wal.listener`): ``on_persisted``
        for each unless an interceptor does better."""
        on_persisted = self.on_persisted
        for msg in msgs:
            on_persisted(msg)

    def on_time_tick(self, time_tick: int) -> None:
        return None

    def on_fenced(self, error: ChannelFencedError) -> None:
        return None

    async def close(self) -> None:
        return None
