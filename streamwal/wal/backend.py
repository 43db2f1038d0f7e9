"""The backend contract (the ``walimpls`` layer): what a log must offer the WAL.

A backend knows nothing of time ticks, interceptors or messages types: it appends
opaque payloads with string properties to one log per channel, hands back ordered
message ids, reads from a delivery policy, and enforces single-writer ownership.

Lifecycle follows the asyncio convention used throughout streamwal: constructors
do no I/O, ``close()`` is idempotent, and every method raises
:class:`~streamwal.errors.ClosedError` once closing has started.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from streamwal.errors import InvalidInputError, short_repr
from streamwal.wal.message_id import MessageId

__all__ = [
    "CHANNEL_NAME_PATTERN",
    "AccessMode",
    "AppendCallback",
    "BackendMessage",
    "BackendOpener",
    "BackendScanner",
    "BackendWAL",
    "ChannelDirectory",
    "DeliveryPolicy",
    "append_entry",
    "settle_future",
    "validate_channel_name",
]

#: ``done(message_id, None)`` once persisted, ``done(None, error)`` if not.
AppendCallback = Callable[[MessageId | None, BaseException | None], None]


def settle_future(
    future: asyncio.Future[MessageId], message_id: MessageId | None, error: BaseException | None
) -> None:
    """An :data:`AppendCallback` that resolves ``future`` (bind it with a partial)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    elif message_id is None:
        future.set_exception(RuntimeError("an append finished without an id or an error"))
    else:
        future.set_result(message_id)


def append_entry(
    backend: BackendWAL, payload: bytes, properties: Mapping[str, str]
) -> asyncio.Future[MessageId]:
    """Submit one entry and return a future of its id: the backend's one append, for
    callers off the hot path (the first time tick, tools, tests)."""
    future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
    backend.submit(payload, properties, functools.partial(settle_future, future))
    return future


CHANNEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
#: Pulsar reads ``<topic>-partition-<n>`` as a partition of ``<topic>``: a producer on
#: such a name waits for a partitioned topic that never comes (AssignChannel hung)
_PARTITION_SUFFIX = re.compile(r"-partition-\d+$")


def validate_channel_name(name: str) -> str:
    """Reject a name that no backend could map to a log, before any I/O."""
    if not isinstance(name, str) or not CHANNEL_NAME_PATTERN.match(name):
        raise InvalidInputError(
            f"invalid channel name {short_repr(name) if isinstance(name, str) else name!r}: "
            "use 1-200 of [A-Za-z0-9_.-], "
            "starting with a letter or digit"
        )
    if _PARTITION_SUFFIX.search(name):
        raise InvalidInputError(
            f"invalid channel name {short_repr(name)}: a name ending in -partition-<n> "
            "is read by Pulsar as a partition of another topic"
        )
    return name


class AccessMode(enum.Enum):
    """How a channel is opened; only ``READ_WRITE`` takes ownership (fences others)."""

    READ_WRITE = "read-write"
    READ_ONLY = "read-only"


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """Where a read starts. Build with the class methods, not the constructor."""

    kind: str
    message_id: MessageId | None = None
    time_tick: int | None = None
    consumer: str | None = None

    ALL = "all"
    LATEST = "latest"
    START_FROM = "start-from"
    START_AFTER = "start-after"
    START_FROM_TIME_TICK = "start-from-time-tick"
    AFTER_CHECKPOINT = "after-checkpoint"

    @classmethod
    def all(cls) -> DeliveryPolicy:
        return cls(cls.ALL)

    @classmethod
    def latest(cls) -> DeliveryPolicy:
        """Only messages appended after the read starts."""
        return cls(cls.LATEST)

    @classmethod
    def start_from(cls, message_id: MessageId) -> DeliveryPolicy:
        """From ``message_id`` inclusive."""
        return cls(cls.START_FROM, message_id=message_id)

    @classmethod
    def start_after(cls, message_id: MessageId) -> DeliveryPolicy:
        """From the message after ``message_id`` (exclusive)."""
        return cls(cls.START_AFTER, message_id=message_id)

    @classmethod
    def start_from_time_tick(cls, time_tick: int) -> DeliveryPolicy:
        """Messages whose time tick is >= ``time_tick`` (WAL level only)."""
        if time_tick < 0:
            raise InvalidInputError(f"time tick must be >= 0, got {time_tick}")
        return cls(cls.START_FROM_TIME_TICK, time_tick=time_tick)

    @classmethod
    def after_checkpoint(cls, consumer: str) -> DeliveryPolicy:
        """After ``consumer``'s checkpoint; from the earliest kept entry if it has none
        (WAL level only: resolved against the channel's checkpoints)."""
        if not isinstance(consumer, str) or not CHANNEL_NAME_PATTERN.match(consumer):
            raise InvalidInputError(f"invalid consumer name {consumer!r}")
        return cls(cls.AFTER_CHECKPOINT, consumer=consumer)

    def __str__(self) -> str:
        if self.consumer is not None:
            return f"{self.kind}({self.consumer})"
        if self.message_id is not None:
            return f"{self.kind}({self.message_id})"
        if self.time_tick is not None:
            return f"{self.kind}({self.time_tick})"
        return self.kind


@dataclass(frozen=True, slots=True)
class BackendMessage:
    """One persisted entry as the backend returns it."""

    message_id: MessageId
    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class BackendScanner(Protocol):
    """An async iterator over persisted entries; ``close()`` may be called at any time.

    Iteration never ends on its own (a log has no end); it raises typed errors
    (:class:`~streamwal.errors.UnavailableError`, :class:`~streamwal.errors.ClosedError`) on
    failure.
    """

    def __aiter__(self) -> AsyncIterator[BackendMessage]: ...

    async def __anext__(self) -> BackendMessage: ...

    async def close(self) -> None: ...


@runtime_checkable
class BackendWAL(Protocol):
    """One channel's log as opened by a backend."""

    @property
    def channel(self) -> str: ...

    @property
    def access_mode(self) -> AccessMode: ...

    async def ensure_writable(self) -> None:
        """Make sure this owner's exclusive writer exists, creating it if needed.

        Creating it is the fence: from then on any earlier owner's appends fail.
        Raises :class:`~streamwal.errors.ChannelFencedError` if this owner was itself
        fenced, :class:`~streamwal.errors.UnavailableError` if the backend did not answer.
        """
        ...

    def submit(self, payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        """Hand one entry to the log now; ``done`` answers it.

        The entry is handed to the log before this method returns, so entries
        submitted in call order are persisted in that order. That is what lets the
        WAL pipeline appends and still keep time ticks increasing in log order.
        ``done`` is called exactly once, on the event loop (possibly before ``submit``
        returns, for an entry refused at once), with the entry's id or an error:
        :class:`~streamwal.errors.ChannelFencedError` (final),
        :class:`~streamwal.errors.UnavailableError` (retriable: call
        :meth:`ensure_writable` and try again), :class:`~streamwal.errors.InvalidInputError`.
        A callback, not an awaitable, because a future and its wake-up per append are
        measurable at the WAL's rate; :func:`append_entry` awaits one where that does
        not matter.
        """
        ...

    async def read(self, policy: DeliveryPolicy) -> BackendScanner: ...

    async def close(self) -> None: ...


@runtime_checkable
class BackendOpener(Protocol):
    """Opens channels of one backend; owns the shared client connection."""

    name: str

    async def open(self, channel: str, mode: AccessMode) -> BackendWAL: ...

    def message_id_from_bytes(self, data: bytes) -> MessageId:
        """Reverse :meth:`MessageId.to_bytes`; invalid input raises ``DecodeError``."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class ChannelDirectory(Protocol):
    """An opener that can tell whether a channel exists without creating it.

    Optional: a reader that must not bring a channel into being by reading it (a
    node serving read-only reads of any name a client sends) asks first; opening a
    log for reading may create it on some backends (Pulsar auto-creates topics).
    """

    async def require_channel(self, channel: str) -> None:
        """Return if ``channel`` exists; :class:`~streamwal.errors.NoSuchChannelError`
        if not, having created nothing; :class:`~streamwal.errors.UnavailableError` if
        the backend did not answer."""
        ...
